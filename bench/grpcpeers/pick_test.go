package grpcpeers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/logx"
	_ "github.com/zeromicro/go-zero/zrpc" // registers go-zero's "p2c_ewma" balancer
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/endpoint"
)

var epoch = time.Now()

// goZeroP2C is the name go-zero registers its p2c picker under.
const goZeroP2C = "p2c_ewma"

// fakeCC is a balancer.ClientConn whose SubConns the benchmark drives to
// READY: both balancers are built through gRPC's registry and measured
// through the picker they hand gRPC, with no network.
type fakeCC struct {
	balancer.ClientConn
	subs   []*fakeSC
	picker balancer.Picker
	state  connectivity.State
}

type fakeSC struct {
	balancer.SubConn
	listener func(balancer.SubConnState)
}

func (s *fakeSC) Connect()  {}
func (s *fakeSC) Shutdown() {}

func (c *fakeCC) NewSubConn(_ []resolver.Address, o balancer.NewSubConnOptions) (balancer.SubConn, error) {
	sc := &fakeSC{listener: o.StateListener}
	c.subs = append(c.subs, sc)
	return sc, nil
}
func (c *fakeCC) UpdateState(s balancer.State)                         { c.picker, c.state = s.Picker, s.ConnectivityState }
func (c *fakeCC) Target() string                                       { return "switchboard:///bench" }
func (c *fakeCC) RemoveSubConn(balancer.SubConn)                       {}
func (c *fakeCC) ResolveNow(resolver.ResolveNowOptions)                {}
func (c *fakeCC) UpdateAddresses(balancer.SubConn, []resolver.Address) {}

// readyPicker builds the balancer registered as name over n ready
// SubConns and returns its picker.
func readyPicker(b *testing.B, name, cfgJSON string, n int) balancer.Picker {
	b.Helper()
	bb := balancer.Get(name)
	if bb == nil {
		b.Fatalf("no balancer %s", name)
	}
	var cfg serviceconfig.LoadBalancingConfig
	if p, ok := bb.(balancer.ConfigParser); ok {
		var err error
		if cfg, err = p.ParseConfig([]byte(cfgJSON)); err != nil {
			b.Fatal(err)
		}
	}
	cc := &fakeCC{}
	bal := bb.Build(cc, balancer.BuildOptions{})
	b.Cleanup(bal.Close)
	var st resolver.State
	for i := range n {
		a := resolver.Address{Addr: fmt.Sprintf("10.0.0.%d:443", i+1)}
		st.Addresses = append(st.Addresses, a)
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{a}})
	}
	if err := bal.UpdateClientConnState(balancer.ClientConnState{ResolverState: st, BalancerConfig: cfg}); err != nil {
		b.Fatal(err)
	}
	for _, sc := range cc.subs {
		sc.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	}
	if cc.state != connectivity.Ready {
		b.Fatalf("%s over %d ready SubConns is %v", name, n, cc.state)
	}
	return cc.picker
}

func config(policy string) string {
	switch policy {
	case balance.ConsistentHashName, balance.MaglevName:
		return `{"hash_key":"metadata:x-user"}`
	case balance.DynamicWeightName:
		return `{"dynamic_weight":{"refresh":"1h"}}`
	}
	return "{}"
}

// BenchmarkGRPCPick measures Pick plus the Done gRPC calls after the RPC,
// over 10 ready SubConns, for every switchboard policy and for go-zero's
// p2c (peer/go-zero_p2c_ewma), serial and with b.RunParallel. Hashing
// policies key on grpcclient.WithHashKey (64 keys in turn).
func BenchmarkGRPCPick(b *testing.B) {
	logx.Disable() // go-zero's picker logs its stats once a minute
	ctxs := make([]context.Context, 64)
	for i := range ctxs {
		ctxs[i] = grpcclient.WithHashKey(context.Background(), fmt.Sprint("user-", i))
	}
	type cand struct{ name, balancer, cfg string }
	var cands []cand
	for _, p := range balance.Policies() {
		cands = append(cands, cand{"switchboard_" + p, grpcclient.BalancerName(p), config(p)})
	}
	cands = append(cands, cand{"go-zero_p2c_ewma", goZeroP2C, ""})
	const method = "/grpc.testing.TestService/UnaryCall"
	answered := balancer.DoneInfo{BytesSent: true, BytesReceived: true} // a call that succeeded
	// Reference points: one read of the monotonic clock (what the
	// latency-reading policies pay twice on top of balance's own Pick and
	// Done), and balance's round_robin Pick+Done without gRPC around it.
	b.Run("reference_clock_read/serial", func(b *testing.B) {
		var sink time.Duration
		for b.Loop() {
			sink += time.Since(epoch)
		}
		_ = sink
	})
	rr, err := balance.New(balance.Config{Policy: balance.RoundRobinName})
	if err != nil {
		b.Fatal(err)
	}
	eps := make([]*endpoint.Endpoint, 10)
	for i := range eps {
		eps[i] = endpoint.New(endpoint.Spec{Address: fmt.Sprintf("10.0.0.%d:443", i+1)})
	}
	rr.Update(&endpoint.Set{Version: 1, All: eps, Ready: eps})
	b.Run("reference_balance_round_robin/serial", func(b *testing.B) {
		b.ReportAllocs()
		var info balance.Info
		o := endpoint.Outcome{Status: 200}
		for b.Loop() {
			r, err := rr.Pick(&info)
			if err != nil {
				b.Fatal(err)
			}
			r.Done(o)
		}
	})
	for _, c := range cands {
		p := readyPicker(b, c.balancer, c.cfg, 10)
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r, err := p.Pick(balancer.PickInfo{FullMethodName: method, Ctx: ctxs[i&63]})
				i++
				if err != nil {
					b.Fatal(err)
				}
				r.Done(answered)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(64)
				for pb.Next() {
					r, err := p.Pick(balancer.PickInfo{FullMethodName: method, Ctx: ctxs[i&63]})
					i++
					if err != nil {
						panic(err)
					}
					r.Done(answered)
				}
			})
		})
	}
}
