package grpcclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"

	"github.com/switchboard-dev/switchboard/balance"
)

// fakeCC is a balancer.ClientConn whose SubConns are driven by the test:
// enough to build a balancer and get its picker without a network.
type fakeCC struct {
	balancer.ClientConn
	subs   []*fakeSC
	picker balancer.Picker
	state  connectivity.State
}

type fakeSC struct {
	balancer.SubConn
	addr     string
	listener func(balancer.SubConnState)
}

func (s *fakeSC) Connect()  {}
func (s *fakeSC) Shutdown() {}

func (c *fakeCC) NewSubConn(addrs []resolver.Address, o balancer.NewSubConnOptions) (balancer.SubConn, error) {
	sc := &fakeSC{addr: addrs[0].Addr, listener: o.StateListener}
	c.subs = append(c.subs, sc)
	return sc, nil
}
func (c *fakeCC) UpdateState(s balancer.State) { c.picker, c.state = s.Picker, s.ConnectivityState }
func (c *fakeCC) Target() string               { return "switchboard:///bench" }

// readyPicker builds policy's balancer over n ready SubConns and returns
// its picker.
func readyPicker(tb testing.TB, policy, cfgJSON string, n int) balancer.Picker {
	tb.Helper()
	bb := balancer.Get(BalancerName(policy))
	if bb == nil {
		tb.Fatalf("balancer %s is not registered", BalancerName(policy))
	}
	cfg, err := bb.(balancer.ConfigParser).ParseConfig([]byte(cfgJSON))
	if err != nil {
		tb.Fatal(err)
	}
	cc := &fakeCC{}
	b := bb.Build(cc, balancer.BuildOptions{})
	tb.Cleanup(b.Close)
	var st resolver.State
	for i := range n {
		a := resolver.Address{Addr: fmt.Sprintf("10.0.%d.%d:443", i/250, i%250+1)}
		st.Endpoints = append(st.Endpoints, SetAttributes(resolver.Endpoint{Addresses: []resolver.Address{a}}, Attributes{Weight: i%5 + 1}))
	}
	if err := b.UpdateClientConnState(balancer.ClientConnState{ResolverState: st, BalancerConfig: cfg}); err != nil {
		tb.Fatal(err)
	}
	for _, sc := range cc.subs {
		sc.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	}
	if cc.state != connectivity.Ready {
		tb.Fatalf("%s over %d ready SubConns is %v", policy, n, cc.state)
	}
	return cc.picker
}

func benchConfig(policy string) string {
	switch policy {
	case balance.ConsistentHashName, balance.MaglevName:
		return `{"hash_key":"metadata:x-user"}`
	case balance.DynamicWeightName:
		return `{"dynamic_weight":{"refresh":"1h"}}`
	}
	return "{}"
}

// keyedContexts are contexts carrying hash keys through WithHashKey.
func keyedContexts(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = WithHashKey(context.Background(), fmt.Sprint("user-", i))
	}
	return ctxs
}

const benchMethod = "/grpc.testing.TestService/UnaryCall"

// A pick and its Done allocate nothing, for every policy (hashing ones
// keyed through WithHashKey).
func TestPickAndDoneDoNotAllocate(t *testing.T) {
	ctxs := keyedContexts(64)
	for _, policy := range balance.Policies() {
		p := readyPicker(t, policy, benchConfig(policy), 10)
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: ctxs[i&63]})
			i++
			if err != nil {
				t.Fatal(err)
			}
			r.Done(balancer.DoneInfo{})
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per Pick+Done; want 0", policy, allocs)
		}
	}
}

// BenchmarkPick measures the gRPC picker's Pick plus the Done gRPC calls
// after the RPC, for every policy over 10 ready SubConns, on one goroutine
// and with b.RunParallel. Hashing policies key on WithHashKey (64 keys in
// turn); the metadata variant shows what reading outgoing metadata costs.
//
//	go test -run '^$' -bench Pick -benchmem ./client/grpcclient/
func BenchmarkPick(b *testing.B) {
	ctxs := keyedContexts(64)
	for _, policy := range balance.Policies() {
		p := readyPicker(b, policy, benchConfig(policy), 10)
		b.Run(policy+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: ctxs[i&63]})
				i++
				if err != nil {
					b.Fatal(err)
				}
				r.Done(balancer.DoneInfo{})
			}
		})
		b.Run(policy+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(64)
				for pb.Next() {
					r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: ctxs[i&63]})
					i++
					if err != nil {
						panic(err)
					}
					r.Done(balancer.DoneInfo{})
				}
			})
		})
	}
	// The key from outgoing metadata: FromOutgoingContext copies it.
	p := readyPicker(b, balance.ConsistentHashName, benchConfig(balance.ConsistentHashName), 10)
	mdCtxs := make([]context.Context, 64)
	for i := range mdCtxs {
		mdCtxs[i] = metadata.AppendToOutgoingContext(context.Background(), "x-user", fmt.Sprint("user-", i))
	}
	b.Run("consistent_hash_metadata_key/serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: mdCtxs[i&63]})
			i++
			if err != nil {
				b.Fatal(err)
			}
			r.Done(balancer.DoneInfo{})
		}
	})
}
