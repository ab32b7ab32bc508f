package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
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

// answered is the DoneInfo of a call that succeeded.
var answered = balancer.DoneInfo{BytesSent: true, BytesReceived: true}

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
			r.Done(answered)
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
				r.Done(answered)
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
					r.Done(answered)
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
			r.Done(answered)
		}
	})
}

// Done reports each call's outcome to the endpoint it was picked for:
// failure codes count against it, other codes and a pick that gRPC gives
// back unused do not, and the in-flight count returns to zero.
func TestDoneReportsTheOutcome(t *testing.T) {
	p := readyPicker(t, balance.RoundRobinName, "{}", 1).(*picker)
	var ep *endpoint.Endpoint
	for e := range p.scs {
		ep = e
	}
	for _, tc := range []struct {
		name     string
		di       balancer.DoneInfo
		failures uint64
	}{
		{"success", answered, 0},
		{"NotFound", balancer.DoneInfo{Err: status.Error(codes.NotFound, "no"), BytesSent: true, BytesReceived: true}, 0},
		{"Unavailable", balancer.DoneInfo{Err: status.Error(codes.Unavailable, "down"), BytesSent: true}, 1},
		{"Internal", balancer.DoneInfo{Err: status.Error(codes.Internal, "bug"), BytesSent: true, BytesReceived: true}, 1},
		{"Canceled", balancer.DoneInfo{Err: status.Error(codes.Canceled, "gone"), BytesSent: true}, 0},
		{"given back unused", balancer.DoneInfo{}, 0},
	} {
		before := ep.Failures()
		r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: context.Background()})
		if err != nil {
			t.Fatal(err)
		}
		if ep.InFlight() != 1 {
			t.Fatalf("%s: in flight after the pick %d; want 1", tc.name, ep.InFlight())
		}
		r.Done(tc.di)
		if ep.InFlight() != 0 || ep.Failures()-before != tc.failures {
			t.Fatalf("%s: in flight %d, failures +%d; want 0, +%d", tc.name, ep.InFlight(), ep.Failures()-before, tc.failures)
		}
	}
}

// The picker's answer while nothing is ready: wait while subchannels
// connect, Unavailable with the reason once none can be reached or the
// resolver has none.
func TestPickerWithoutReadyEndpoints(t *testing.T) {
	bb := balancer.Get(BalancerName(balance.RoundRobinName))
	cc := &fakeCC{}
	b := bb.Build(cc, balancer.BuildOptions{})
	defer b.Close()
	a := resolver.Address{Addr: "10.0.0.1:443"}
	st := resolver.State{Endpoints: []resolver.Endpoint{{Addresses: []resolver.Address{a}}}}
	if err := b.UpdateClientConnState(balancer.ClientConnState{ResolverState: st}); err != nil {
		t.Fatal(err)
	}
	pick := func() error {
		_, err := cc.picker.Pick(balancer.PickInfo{Ctx: context.Background()})
		return err
	}
	if err := pick(); err != balancer.ErrNoSubConnAvailable || cc.state != connectivity.Connecting {
		t.Fatalf("while connecting: %v, %v; want ErrNoSubConnAvailable, CONNECTING", err, cc.state)
	}
	cc.subs[0].listener(balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: errors.New("connection refused")})
	if err := pick(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") || cc.state != connectivity.TransientFailure {
		t.Fatalf("all failing: %v, %v; want Unavailable naming the connection error, TRANSIENT_FAILURE", err, cc.state)
	}
	if err := b.UpdateClientConnState(balancer.ClientConnState{}); err != balancer.ErrBadResolverState {
		t.Fatalf("an empty resolver state: %v; want ErrBadResolverState", err)
	}
	if err := pick(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no instances") {
		t.Fatalf("no instances: %v; want Unavailable saying so", err)
	}
}
