package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// longAgo is a Since for endpoints that are past any slow start.
var longAgo = time.Now().Add(-24 * time.Hour)

// useFakeClock installs a clock.Fake as b's one clock (its rebuilder's, and
// the EWMA policies' own) and returns it: slow-start steps, EWMA decay and
// refreshes then move only when the test advances it. It starts an hour
// after the real now: endpoints from newEndpoints have served since they
// were made (SetStatus keeps Since while the state stays Healthy), so they
// are past any slow start; and clock.Nanos stays positive as in production
// (an EWMA stamp of 0 means "never"). Call it before the first Update.
func useFakeClock(b Balancer) *clock.Fake {
	clk := clock.NewFake(time.Now().Add(time.Hour))
	if rb := rebuilderOf(b); rb != nil {
		rb.mu.Lock()
		rb.clock = clk
		rb.mu.Unlock()
	}
	switch b := b.(type) {
	case *P2CEWMA:
		b.p.clock = clk
	case *DynamicWeight:
		b.p.clock = clk
	}
	return clk
}

// newEndpoints returns ready endpoints 10.0.0.i:80 with the given weights,
// serving since longAgo.
func newEndpoints(weights ...int) []*endpoint.Endpoint {
	eps := make([]*endpoint.Endpoint, len(weights))
	for i, w := range weights {
		eps[i] = endpoint.New(endpoint.Spec{Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1), Weight: w})
		eps[i].SetStatus(endpoint.Healthy, "test", longAgo)
	}
	return eps
}

// equalWeights returns n ones.
func equalWeights(n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

// setOf returns a Set with all of eps ready.
func setOf(eps []*endpoint.Endpoint) *endpoint.Set {
	return &endpoint.Set{Version: 1, All: eps, Ready: eps}
}

// builtinPolicies are the policies this package registers; the tests that
// judge every policy range over them, not over Policies(), which also
// lists the one example_policy_test.go registers.
var builtinPolicies = []string{ConsistentHashName, DynamicWeightName, LeastConnName, MaglevName, P2CName, P2CEWMAName, RandomName, RoundRobinName, WeightedRandomName, WeightedRoundRobinName}

// testConfig is a valid configuration of policy for tests.
func testConfig(policy string) Config {
	cfg := Config{Policy: policy}
	switch policy {
	case ConsistentHashName, MaglevName:
		cfg.HashKey = "header:X-User-Id"
	case DynamicWeightName:
		// No refresh from Done during a test unless it asks for one.
		cfg.DynamicWeight.Refresh = time.Hour
	}
	return cfg
}

// hashing reports whether policy uses Info.Key.
func hashing(policy string) bool { return policy == ConsistentHashName || policy == MaglevName }

// mustNew builds cfg with a seeded random source.
func mustNew(t testing.TB, cfg Config, seed uint64) Balancer {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	seedRand(b, seed)
	return b
}

// seedRand makes b's random draws deterministic.
func seedRand(b Balancer, seed uint64) {
	if r, ok := b.(randSetter); ok {
		r.setRand(rand.New(rand.NewPCG(seed, seed^0x5eed)).Uint64)
	}
}

// keys returns n distinct request keys.
func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("user-%d", i)
	}
	return k
}

// shares picks n times (Done right away with outcome) and returns each
// endpoint's fraction of the picks, in the order of eps.
func shares(t testing.TB, b Balancer, eps []*endpoint.Endpoint, n int, hashed bool, o endpoint.Outcome) []float64 {
	t.Helper()
	idx := map[*endpoint.Endpoint]int{}
	for i, ep := range eps {
		idx[ep] = i
	}
	ks := keys(n)
	counts := make([]float64, len(eps))
	var info Info
	for i := range n {
		if hashed {
			info.Key, info.HasKey = ks[i], true
		}
		r, err := b.Pick(&info)
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		counts[idx[r.Endpoint]]++
		r.Done(o)
	}
	for i := range counts {
		counts[i] /= float64(n)
	}
	return counts
}

// weightShares returns w normalised to fractions.
func weightShares(w []int) []float64 {
	sum := 0
	for _, x := range w {
		sum += x
	}
	out := make([]float64, len(w))
	for i, x := range w {
		out[i] = float64(x) / float64(sum)
	}
	return out
}

// checkShares fails unless got is within tol (a fraction) of want
// everywhere.
func checkShares(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Errorf("%s: endpoint %d got %.2f%% of picks, want %.2f%% ± %.1f points (all: got %s want %s)",
				what, i, 100*got[i], 100*want[i], 100*tol, pct(got), pct(want))
			return
		}
	}
}

func pct(v []float64) string {
	s := "["
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.2f%%", 100*x)
	}
	return s + "]"
}
