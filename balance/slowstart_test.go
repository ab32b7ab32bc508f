package balance

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// rebuilderOf returns the rebuilder of a policy that has one.
func rebuilderOf(b Balancer) *rebuilder {
	switch b := b.(type) {
	case *WeightedRoundRobin:
		return b.rb
	case *WeightedRandom:
		return b.rb
	case *LeastConn:
		return b.rb
	case *P2C:
		return b.rb
	case *P2CEWMA:
		return b.rb
	case *DynamicWeight:
		return b.rb
	case *ConsistentHash:
		return b.rb
	case *Maglev:
		return b.rb
	}
	return nil
}

// slowStartPolicies are the policies that ramp weights.
var slowStartPolicies = []string{WeightedRoundRobinName, WeightedRandomName, LeastConnName, P2CName, P2CEWMAName, DynamicWeightName, ConsistentHashName}

// TestSlowStartRampsShare: an endpoint that became healthy at t0 next to an
// old one of the same weight gets f/(1+f) of the traffic, with f its ramp
// factor: 9.1% just after t0, 35.5% halfway through the window, 50% after
// it. consistent_hash ramps its ring points instead: its share is whatever
// arcs the new points cover, which must grow, and keys may only move onto
// the new endpoint. Only the step timer rebuilds: the test advances the
// clock and never calls rebuildAt.
func TestSlowStartRampsShare(t *testing.T) {
	const window = 10 * time.Second
	for _, policy := range slowStartPolicies {
		t.Run(policy, func(t *testing.T) {
			eps := newEndpoints(1, 1)
			fresh := eps[1]
			cfg := testConfig(policy)
			cfg.SlowStart = window
			b := mustNew(t, cfg, 1)
			clk := useFakeClock(b)
			t0 := clk.Now()
			fresh.SetStatus(endpoint.Unhealthy, "test", t0.Add(-time.Minute))
			fresh.SetStatus(endpoint.Healthy, "recovered", t0)
			clk.Advance(time.Millisecond)
			b.Update(setOf(eps))
			t.Cleanup(func() {
				if p := clk.Pending(); len(p) != 0 {
					t.Errorf("timers still armed after the ramp: %v", p)
				}
			})

			var prev []float64
			var prevOwners map[string]string
			ks := keys(20_000)
			// The step timer rebuilds every window/20 from the Update at
			// t0+1ms, so each of these times is a rebuild's.
			for _, step := range []struct {
				at   time.Duration
				want float64
			}{{time.Millisecond, 0.1 / 1.1}, {window/2 + time.Millisecond, 0.55 / 1.55}, {window + time.Second + time.Millisecond, 0.5}} {
				clk.Advance(t0.Add(step.at).Sub(clk.Now()))
				got := shares(t, b, eps, 50_000, hashing(policy), endpoint.Outcome{Latency: time.Millisecond})
				if policy != ConsistentHashName {
					checkShares(t, fmt.Sprintf("at t0+%v", step.at), got, []float64{1 - step.want, step.want}, 0.02)
					continue
				}
				arcs := ringShares(b.(*ConsistentHash).snap.Load(), 2)
				checkShares(t, fmt.Sprintf("at t0+%v against ring arcs", step.at), got, arcs, 0.02)
				if prev != nil && !(arcs[1] > prev[1]) {
					t.Errorf("at t0+%v the new endpoint's share %s did not grow from %s", step.at, pct(arcs), pct(prev))
				}
				if arcs[1] > step.want+0.12 || arcs[1] < step.want-0.12 {
					t.Errorf("at t0+%v the new endpoint's arcs cover %.1f%%, far from the ramp's %.1f%%", step.at, 100*arcs[1], 100*step.want)
				}
				own := owners(t, b, ks)
				for k, a := range prevOwners {
					if own[k] != a && own[k] != fresh.Address() {
						t.Fatalf("key %s moved from %s to %s during the ramp; keys may only move onto the ramping endpoint", k, a, own[k])
					}
				}
				prev, prevOwners = arcs, own
			}
		})
	}
}

func TestRampFactor(t *testing.T) {
	for _, tc := range []struct {
		elapsed, window time.Duration
		want            float64
	}{
		{0, 10 * time.Second, 0.1},
		{-time.Second, 10 * time.Second, 0.1},
		{5 * time.Second, 10 * time.Second, 0.55},
		{10 * time.Second, 10 * time.Second, 1},
		{time.Hour, 10 * time.Second, 1},
		{0, 0, 1},
	} {
		if got := rampFactor(tc.elapsed, tc.window); got != tc.want {
			t.Errorf("rampFactor(%v, %v) = %v, want %v", tc.elapsed, tc.window, got, tc.want)
		}
	}
}

// TestSlowStartIgnoresReassertedState: a health checker that sets Healthy
// again (a new Since) must not restart the ramp of an endpoint that stayed
// ready; one that left the ready set and came back ramps again.
func TestSlowStartIgnoresReassertedState(t *testing.T) {
	const window = 10 * time.Second
	eps := newEndpoints(1, 1)
	b := NewWeightedRandom(Config{SlowStart: window})
	clk := useFakeClock(b)
	t0 := clk.Now()
	b.Update(setOf(eps))
	if p := clk.Pending(); len(p) != 0 {
		t.Fatalf("endpoints serving since long ago started a ramp (timers %v)", p)
	}
	eps[1].SetStatus(endpoint.Healthy, "check passed", t0) // same state: Since kept
	b.Update(setOf(eps))
	if p := clk.Pending(); len(p) != 0 {
		t.Fatalf("re-asserting Healthy restarted the ramp (timers %v)", p)
	}
	eps[1].SetStatus(endpoint.Ejected, "5 failures", t0)
	b.Update(&endpoint.Set{All: eps, Ready: eps[:1]})
	eps[1].SetStatus(endpoint.Healthy, "recovered", t0)
	b.Update(setOf(eps)) // back, Since t0
	if p := clk.Pending(); len(p) != 1 || p[0] != window/rampSteps {
		t.Fatalf("an endpoint back in the ready set with a recent Since: timers %v, want one ramp step of %v", p, window/rampSteps)
	}
	clk.Advance(window)
	if p := clk.Pending(); len(p) != 0 {
		t.Fatalf("the step timer is still armed after the ramp: %v", p)
	}
}
