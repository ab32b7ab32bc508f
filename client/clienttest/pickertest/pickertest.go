// Package pickertest builds a gRPC balancer by name over subchannels that a
// test or benchmark drives itself, and hands back the picker the balancer
// gives gRPC: enough to measure or check a pick without a network — a
// switchboard_<policy> balancer of package client/grpcclient, a policy of
// your own, or any other registered gRPC balancer, in the same run. The
// grpcclient tests and the peer benchmarks of bench/grpcpeers (go-zero's
// p2c) use it.
package pickertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/switchboard-dev/switchboard/balance"
)

// ClientConn is a balancer.ClientConn that records the SubConns a
// balancer creates and the last state it published.
type ClientConn struct {
	balancer.ClientConn
	Subs   []*SubConn
	Picker balancer.Picker
	State  connectivity.State
}

// SubConn is a subchannel that does nothing; SetState reports a
// connectivity state to the balancer that created it.
type SubConn struct {
	balancer.SubConn
	Addr     string
	listener func(balancer.SubConnState)
}

// SetState tells the balancer that the subchannel is in st.
func (s *SubConn) SetState(st balancer.SubConnState) { s.listener(st) }

func (s *SubConn) Connect()  {}
func (s *SubConn) Shutdown() {}

func (c *ClientConn) NewSubConn(addrs []resolver.Address, o balancer.NewSubConnOptions) (balancer.SubConn, error) {
	sc := &SubConn{Addr: addrs[0].Addr, listener: o.StateListener}
	c.Subs = append(c.Subs, sc)
	return sc, nil
}
func (c *ClientConn) UpdateState(s balancer.State)                         { c.Picker, c.State = s.Picker, s.ConnectivityState }
func (c *ClientConn) RemoveSubConn(balancer.SubConn)                       {}
func (c *ClientConn) UpdateAddresses(balancer.SubConn, []resolver.Address) {}
func (c *ClientConn) ResolveNow(resolver.ResolveNowOptions)                {}
func (c *ClientConn) Target() string                                       { return "pickertest:///bench" }

// Endpoints returns n endpoints of one address each, 10.0.x.y:443.
func Endpoints(n int) []resolver.Endpoint {
	eps := make([]resolver.Endpoint, n)
	for i := range eps {
		a := resolver.Address{Addr: fmt.Sprintf("10.0.%d.%d:443", i/250, i%250+1)}
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{a}}
	}
	return eps
}

// Build builds the balancer registered as name, with the service-config
// JSON cfg when it takes one, and gives it eps. It is closed with tb.
func Build(tb testing.TB, name, cfg string, eps []resolver.Endpoint) (balancer.Balancer, *ClientConn) {
	tb.Helper()
	bb := balancer.Get(name)
	if bb == nil {
		tb.Fatalf("no balancer %s is registered", name)
	}
	var lbc serviceconfig.LoadBalancingConfig
	if p, ok := bb.(balancer.ConfigParser); ok {
		var err error
		if lbc, err = p.ParseConfig([]byte(cfg)); err != nil {
			tb.Fatal(err)
		}
	}
	cc := &ClientConn{}
	b := bb.Build(cc, balancer.BuildOptions{})
	tb.Cleanup(b.Close)
	st := resolver.State{Endpoints: eps}
	for _, ep := range eps {
		st.Addresses = append(st.Addresses, ep.Addresses[0]) // for balancers that read only these
	}
	if err := b.UpdateClientConnState(balancer.ClientConnState{ResolverState: st, BalancerConfig: lbc}); err != nil {
		tb.Fatal(err)
	}
	return b, cc
}

// ReadyPicker builds the balancer as Build does, reports every subchannel
// READY and returns the picker.
func ReadyPicker(tb testing.TB, name, cfg string, eps []resolver.Endpoint) balancer.Picker {
	tb.Helper()
	_, cc := Build(tb, name, cfg, eps)
	for _, sc := range cc.Subs {
		sc.SetState(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	}
	if cc.State != connectivity.Ready {
		tb.Fatalf("%s over %d ready subchannels is %v", name, len(eps), cc.State)
	}
	return cc.Picker
}

// Config is the switchboard balancer config the tests give policy: hashing
// policies key on the metadata x-user, dynamic_weight refreshes its
// weights only when asked (so that a measurement sees no rebuild).
func Config(policy string) string {
	switch policy {
	case balance.ConsistentHashName, balance.MaglevName:
		return `{"hash_key":"metadata:x-user"}`
	case balance.DynamicWeightName:
		return `{"dynamic_weight":{"refresh":"1h"}}`
	}
	return "{}"
}

// Answered is the DoneInfo of a call that succeeded.
var Answered = balancer.DoneInfo{BytesSent: true, BytesReceived: true}

// Bench measures p's Pick plus the Done of an answered call, as
// name/serial and, with b.RunParallel, name/parallel; and the Pick alone
// as name/pick-only. Pick i gets ctxs[i
// mod len(ctxs)] (contexts carrying hash keys, say).
func Bench(b *testing.B, name string, p balancer.Picker, method string, ctxs []context.Context) {
	info := func(i int) balancer.PickInfo {
		return balancer.PickInfo{FullMethodName: method, Ctx: ctxs[i%len(ctxs)]}
	}
	b.Run(name+"/serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, err := p.Pick(info(i))
			i++
			if err != nil {
				b.Fatal(err)
			}
			r.Done(Answered)
		}
	})
	// The Pick alone, as gRPC makes it before it sends: picks are timed
	// in batches, and their Dones are called with the timer stopped.
	b.Run(name+"/pick-only", func(b *testing.B) {
		b.ReportAllocs()
		const batch = 256
		dones := make([]func(balancer.DoneInfo), 0, batch)
		for i := 0; i < b.N; {
			n := min(batch, b.N-i)
			for j := 0; j < n; j++ {
				r, err := p.Pick(info(i + j))
				if err != nil {
					b.Fatal(err)
				}
				dones = append(dones, r.Done)
			}
			i += n
			b.StopTimer()
			for _, d := range dones {
				d(Answered)
			}
			dones = dones[:0]
			b.StartTimer()
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(ctxs))
			for pb.Next() {
				r, err := p.Pick(info(i))
				i++
				if err != nil {
					panic(err)
				}
				r.Done(Answered)
			}
		})
	})
}
