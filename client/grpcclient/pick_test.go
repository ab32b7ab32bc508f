package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/client/clienttest/pickertest"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// readyPicker builds policy's balancer over n ready subchannels, weighted
// 1 to 5 through the endpoint attributes, and returns its picker.
func readyPicker(tb testing.TB, policy, cfg string, n int) balancer.Picker {
	tb.Helper()
	eps := pickertest.Endpoints(n)
	for i := range eps {
		eps[i] = SetAttributes(eps[i], Attributes{Weight: i%5 + 1})
	}
	return pickertest.ReadyPicker(tb, BalancerName(policy), cfg, eps)
}

// keyedContexts are contexts carrying hash keys through WithHashKey.
func keyedContexts(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = WithHashKey(context.Background(), fmt.Sprint("user-", i))
	}
	return ctxs
}

var answered = pickertest.Answered

const benchMethod = "/grpc.testing.TestService/UnaryCall"

// A pick and its Done allocate nothing, for every policy (hashing ones
// keyed through WithHashKey).
func TestPickAndDoneDoNotAllocate(t *testing.T) {
	ctxs := keyedContexts(64)
	for _, policy := range balance.Policies() {
		p := readyPicker(t, policy, pickertest.Config(policy), 10)
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
		pickertest.Bench(b, policy, readyPicker(b, policy, pickertest.Config(policy), 10), benchMethod, ctxs)
	}
	// The key from outgoing metadata: FromOutgoingContext copies it.
	p := readyPicker(b, balance.ConsistentHashName, pickertest.Config(balance.ConsistentHashName), 10)
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
	for _, e := range p.scs.eps {
		if e != nil {
			ep = e
		}
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
// connect, an error with the reason once none can be reached or the
// resolver has none. That error is no status error, so that gRPC fails a
// fail-fast call with Unavailable and lets a WaitForReady call wait.
func TestPickerWithoutReadyEndpoints(t *testing.T) {
	b, cc := pickertest.Build(t, BalancerName(balance.RoundRobinName), "{}", pickertest.Endpoints(1))
	pick := func() error {
		_, err := cc.Picker.Pick(balancer.PickInfo{Ctx: context.Background()})
		return err
	}
	if err := pick(); err != balancer.ErrNoSubConnAvailable || cc.State != connectivity.Connecting {
		t.Fatalf("while connecting: %v, %v; want ErrNoSubConnAvailable, CONNECTING", err, cc.State)
	}
	cc.Subs[0].SetState(balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: errors.New("connection refused")})
	plain := func(err error) bool { _, isStatus := status.FromError(err); return err != nil && !isStatus }
	if err := pick(); !plain(err) || !strings.Contains(err.Error(), "connection refused") || cc.State != connectivity.TransientFailure {
		t.Fatalf("all failing: %v, %v; want a plain error naming the connection error, TRANSIENT_FAILURE", err, cc.State)
	}
	if err := b.UpdateClientConnState(balancer.ClientConnState{}); err != balancer.ErrBadResolverState {
		t.Fatalf("an empty resolver state: %v; want ErrBadResolverState", err)
	}
	if err := pick(); !plain(err) || !strings.Contains(err.Error(), "no instances") {
		t.Fatalf("no instances: %v; want a plain error saying so", err)
	}
}

// outcomeRecorder is an endpoint observer that keeps every outcome.
type outcomeRecorder struct{ got []endpoint.Outcome }

func (r *outcomeRecorder) Observe(_ *endpoint.Endpoint, o endpoint.Outcome) {
	r.got = append(r.got, o)
}

// For a policy that reads latency, Done hands it the clock reading that
// ended the latency in Outcome.At: the pick's reading plus the latency
// (so the policy reads no clock of its own), between readings taken
// around Pick and after Done. A policy that reads no latency gets neither
// reading.
func TestDoneHandsThePolicyItsClockReading(t *testing.T) {
	for _, tc := range []struct {
		policy string
		clock  bool
	}{{balance.P2CEWMAName, true}, {balance.DynamicWeightName, true}, {balance.RoundRobinName, false}} {
		p := readyPicker(t, tc.policy, pickertest.Config(tc.policy), 1).(*picker)
		rec := &outcomeRecorder{}
		for _, ep := range p.scs.eps {
			if ep != nil {
				ep.SetObserver(rec)
			}
		}
		before := endpoint.Nanotime()
		r, err := p.Pick(balancer.PickInfo{FullMethodName: benchMethod, Ctx: context.Background()})
		if err != nil {
			t.Fatal(err)
		}
		picked := endpoint.Nanotime()
		r.Done(answered)
		after := endpoint.Nanotime()
		if len(rec.got) != 1 {
			t.Fatalf("%s: the endpoint heard %d outcomes; want 1", tc.policy, len(rec.got))
		}
		o := rec.got[0]
		if !tc.clock {
			if o.At != 0 || o.Latency != 0 {
				t.Errorf("%s reads no latency, but Done read the clock: At %d, Latency %v", tc.policy, o.At, o.Latency)
			}
			continue
		}
		start := o.At - int64(o.Latency)
		if start < before || start > picked || o.At < picked || o.At > after {
			t.Errorf("%s: pick read at %d and Done at %d (latency %v); want the pick's reading in [%d, %d] and Done's in [%d, %d]",
				tc.policy, start, o.At, o.Latency, before, picked, picked, after)
		}
	}
}
