package grpcpeers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/logx"
	_ "github.com/zeromicro/go-zero/zrpc" // registers go-zero's "p2c_ewma" balancer

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/client/clienttest/pickertest"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/endpoint"
)

var epoch = time.Now()

// goZeroP2C is the name go-zero registers its p2c picker under.
const goZeroP2C = "p2c_ewma"

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
		cands = append(cands, cand{"switchboard_" + p, grpcclient.BalancerName(p), pickertest.Config(p)})
	}
	cands = append(cands, cand{"go-zero_p2c_ewma", goZeroP2C, ""})
	const method = "/grpc.testing.TestService/UnaryCall"
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
		p := pickertest.ReadyPicker(b, c.balancer, c.cfg, pickertest.Endpoints(10))
		pickertest.Bench(b, c.name, p, method, ctxs)
	}
}
