package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client/clienttest/pickertest"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// Every balance policy, as a gRPC balancer, routes real calls over the
// switchboard resolver to every registered server.
func TestEveryPolicyRoutesRealCalls(t *testing.T) {
	env := startRegistry(t)
	servers := []*testServer{startServer(t, "a"), startServer(t, "b"), startServer(t, "c")}
	for i, s := range servers {
		env.register(t, "orders", s, i+1)
	}
	b := env.builder(t)
	if len(balance.Policies()) < 10 {
		t.Fatalf("balance.Policies() = %v; expected every policy", balance.Policies())
	}
	for _, policy := range balance.Policies() {
		t.Run(policy, func(t *testing.T) {
			c := dial(t, b, "orders", lbConfig(policy, pickertest.Config(policy)))
			// Wait until every server is connected: the pick spreads over
			// ready endpoints only.
			seen := map[string]int{}
			deadline := time.Now().Add(10 * time.Second)
			for i := 0; len(seen) < 3 || i < 90; i++ {
				if time.Now().After(deadline) {
					t.Fatalf("after %d calls within 10s the servers answering were %v; want a, b and c", i, seen)
				}
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", fmt.Sprint("user-", i))
				id, err := call(ctx, c)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				seen[id]++
			}
		})
	}
}

// p2c_ewma moves traffic away from a server that turned slow.
func TestP2CEWMAMovesTrafficAwayFromASlowServer(t *testing.T) {
	env := startRegistry(t)
	a, b, slow := startServer(t, "a"), startServer(t, "b"), startServer(t, "slow")
	for _, s := range []*testServer{a, b, slow} {
		env.register(t, "orders", s, 0)
	}
	// A short decay window, so that a latency spike of a fast server (a
	// loaded -race run has them) is forgotten within a fraction of the
	// test, as is the slow server's estimate between its probes.
	c := dial(t, env.builder(t), "orders", lbConfig(balance.P2CEWMAName, `{"decay_window":"250ms"}`))
	seen := map[string]bool{}
	waitUntil(t, c, "all three answer", 1, func(id string) bool { seen[id] = true; return len(seen) == 3 })

	slow.delay.Store(int64(50 * time.Millisecond))
	before := map[*testServer]int64{a: a.calls.Load(), b: b.calls.Load(), slow: slow.calls.Load()}
	const calls = 300
	for i := range calls {
		if _, err := call(context.Background(), c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	share := func(s *testServer) float64 { return float64(s.calls.Load()-before[s]) / calls }
	// Round robin would give the slow server a third (100 calls); p2c_ewma
	// sends it a call only when its estimate has decayed below a fast
	// one's (a probe, every second or so).
	if share(slow) > 0.1 {
		t.Fatalf("shares over %d calls: a %.2f, b %.2f, slow %.2f; want slow at most 0.10",
			calls, share(a), share(b), share(slow))
	}
}

// consistent_hash and maglev send every call with the same metadata key,
// or the same WithHashKey key, to the same server.
func TestHashingSendsTheSameKeyToTheSameServer(t *testing.T) {
	env := startRegistry(t)
	for _, id := range []string{"a", "b", "c"} {
		env.register(t, "orders", startServer(t, id), 0)
	}
	b := env.builder(t)
	for _, policy := range []string{balance.ConsistentHashName, balance.MaglevName} {
		t.Run(policy, func(t *testing.T) {
			c := dial(t, b, "orders", lbConfig(policy, `{"hash_key":"metadata:x-user"}`))
			seen := map[string]bool{}
			waitUntil(t, c, "all three answer", 1, func(id string) bool { seen[id] = true; return len(seen) == 3 })
			keyed := map[string]func(context.Context, string) context.Context{
				"metadata": func(ctx context.Context, k string) context.Context {
					return metadata.AppendToOutgoingContext(ctx, "x-user", k)
				},
				"context": grpcclient.WithHashKey,
			}
			for how, with := range keyed {
				owners := map[string]bool{}
				for k := range 30 {
					key := fmt.Sprint("user-", k)
					first := ""
					for i := range 5 {
						id, err := call(with(context.Background(), key), c)
						if err != nil {
							t.Fatalf("%s key %s call %d: %v", how, key, i, err)
						}
						if first == "" {
							first = id
						} else if id != first {
							t.Fatalf("%s key %s: call %d went to %s, the first to %s", how, key, i, id, first)
						}
					}
					owners[first] = true
				}
				if len(owners) < 2 {
					t.Fatalf("%s keys: 30 keys all went to %v; want them spread", how, owners)
				}
			}
		})
	}
}

// A bad loadBalancingConfig fails grpc.NewClient with an error naming
// the key.
func TestBadBalancerConfigIsAFieldError(t *testing.T) {
	for _, tc := range []struct{ policy, cfg, want string }{
		{balance.ConsistentHashName, `{"hash_key":"cookie:sid"}`, "hash_key"},
		{balance.P2CEWMAName, `{"decay_window":"-1s"}`, "decay_window"},
		{balance.RoundRobinName, `{"bogus":1}`, "bogus"},
		{balance.RoundRobinName, `{"slow_start":"1s"}`, "slow_start"},
		{balance.RoundRobinName, `{"policy":"p2c"}`, "policy"},
	} {
		_, err := grpc.NewClient("passthrough:///127.0.0.1:1",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(lbConfig(tc.policy, tc.cfg)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v; want an error naming %s", tc.policy, tc.cfg, err, tc.want)
		}
	}
}

func TestServiceConfigRendersTheBalanceKeys(t *testing.T) {
	got := grpcclient.ServiceConfig(balance.ConsistentHashName, balance.Config{HashKey: "metadata:x-user", BoundedLoad: 1.25, SlowStart: 30 * time.Second})
	want := `{"loadBalancingConfig":[{"switchboard_consistent_hash":{"bounded_load":1.25,"hash_key":"metadata:x-user","slow_start":"30s"}}]}`
	if got != want {
		t.Fatalf("ServiceConfig:\n got %s\nwant %s", got, want)
	}
	nested := grpcclient.ServiceConfig(balance.DynamicWeightName, balance.Config{DynamicWeight: balance.DynamicWeightConfig{
		CPU: 0.5, Refresh: 2 * time.Second,
		Factors: map[string]balance.DynamicFactor{"queue": {Coefficient: 0.2, Max: 100}},
	}})
	if want := `{"loadBalancingConfig":[{"switchboard_dynamic_weight":{"dynamic_weight":{"cpu":0.5,"factors":{"queue":{"coefficient":0.2,"max":100}},"refresh":"2s"}}}]}`; nested != want {
		t.Fatalf("ServiceConfig:\n got %s\nwant %s", nested, want)
	}
	// And gRPC accepts them.
	for _, sc := range []string{got, nested} {
		cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(sc))
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		cc.Close()
	}
}

// The registry's weights reach the balancer: weighted_round_robin over
// weights 1, 2, 3 answers 10, 20 and 30 of 60 calls.
func TestRegistryWeightsReachTheBalancer(t *testing.T) {
	env := startRegistry(t)
	servers := []*testServer{startServer(t, "a"), startServer(t, "b"), startServer(t, "c")}
	for i, s := range servers {
		env.register(t, "orders", s, i+1)
	}
	c := dial(t, env.builder(t), "orders", lbConfig(balance.WeightedRoundRobinName, ""))
	seen := map[string]bool{}
	waitUntil(t, c, "all three answer", 1, func(id string) bool { seen[id] = true; return len(seen) == 3 })
	got := map[string]int{}
	for i := range 60 {
		id, err := call(context.Background(), c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got[id]++
	}
	if got["a"] != 10 || got["b"] != 20 || got["c"] != 30 {
		t.Fatalf("60 calls over weights 1, 2, 3: %v; want a:10 b:20 c:30", got)
	}
}

// With missing_key: error a hashing balancer refuses a call without a key
// with ErrNoHashKey, without calling a server, and the breaker does not
// count it against the service.
func TestMissingHashKeyFailsWithErrNoHashKey(t *testing.T) {
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, env.builder(t), "orders", lbConfig(balance.ConsistentHashName, `{"hash_key":"metadata:x-user","missing_key":"error"}`),
		grpc.WithUnaryInterceptor(grpcclient.UnaryBreaker(br, 0)))
	ctx := grpcclient.WithHashKey(context.Background(), "u1")
	if id, err := call(ctx, c); err != nil || id != "a" {
		t.Fatalf("call with a key: %q, %v", id, err)
	}
	for range 3 {
		if _, err := call(context.Background(), c); !errors.Is(err, grpcclient.ErrNoHashKey) {
			t.Fatalf("call without a key: %v; want ErrNoHashKey", err)
		}
	}
	if st := br.State(time.Now()); st != breaker.Closed {
		t.Fatalf("after calls without a key the breaker is %v; want closed", st)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("the server got %d calls; want 1", n)
	}
}

// A call refused for want of a hash key never left the client: it counts
// neither way, so it does not close a half-open breaker, and it gives its
// probe slot back. It fails at once even when it would wait for ready.
func TestMissingHashKeyCountsNeitherWayInHalfOpen(t *testing.T) {
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Millisecond, HalfOpenProbes: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, env.builder(t), "orders", lbConfig(balance.ConsistentHashName, `{"hash_key":"metadata:x-user","missing_key":"error"}`),
		grpc.WithUnaryInterceptor(grpcclient.UnaryBreaker(br, 0)))
	keyed := grpcclient.WithHashKey(context.Background(), "u1")
	if id, err := call(keyed, c); err != nil || id != "a" {
		t.Fatalf("call with a key: %q, %v", id, err)
	}
	s.fail.Store(uint32(codes.Unavailable))
	if _, err := call(keyed, c); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing call: %v; want Unavailable", err)
	}
	s.fail.Store(0)
	testutil.WaitFor(t, 10*time.Second, "the breaker to turn half-open", func() bool { return br.State(time.Now()) == breaker.HalfOpen })
	_, err = call(context.Background(), c, grpc.WaitForReady(true))
	if !errors.Is(err, grpcclient.ErrNoHashKey) || !errors.Is(err, balance.ErrNoHashKey) || status.Code(err) != codes.Internal {
		t.Fatalf("a keyless (WaitForReady) call in half-open: %v; want ErrNoHashKey, also balance.ErrNoHashKey, code Internal", err)
	}
	if st := br.State(time.Now()); st != breaker.HalfOpen {
		t.Fatalf("after a keyless probe the breaker is %v; want still half-open", st)
	}
	if id, err := call(keyed, c); err != nil || id != "a" {
		t.Fatalf("keyed call after the keyless probe: %q, %v; want a (the probe slot given back)", id, err)
	}
	if st := br.State(time.Now()); st != breaker.Closed {
		t.Fatalf("after a successful probe the breaker is %v; want closed", st)
	}
}
