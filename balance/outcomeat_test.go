package balance

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// atRecorder is an endpoint observer that keeps the At of every outcome.
type atRecorder struct{ at []int64 }

func (r *atRecorder) Observe(_ *endpoint.Endpoint, o endpoint.Outcome) { r.at = append(r.at, o.At) }

// stampOf is the time of the last observation p2c_ewma or dynamic_weight
// folded into ep's averages.
func stampOf(t *testing.T, b Balancer) int64 {
	t.Helper()
	switch b := b.(type) {
	case *P2CEWMA:
		return b.snap.Load().sides[0].stamp.Load()
	case *DynamicWeight:
		return b.snap.Load().sides[0].obs.stamp.Load()
	}
	t.Fatalf("%T keeps no stamp", b)
	return 0
}

// A Done whose outcome carries At folds the outcome in as of At and reads
// no clock; one without At reads the policy's clock. Either way the
// endpoint's observer (the breaker, passive health) gets the time in At.
func TestLatencyPoliciesTakeTheDoneTimeFromOutcomeAt(t *testing.T) {
	for _, policy := range []string{P2CEWMAName, DynamicWeightName} {
		t.Run(policy, func(t *testing.T) {
			b := mustNew(t, testConfig(policy), 1)
			clk := useFakeClock(b)
			eps := newEndpoints(1)
			rec := &atRecorder{}
			eps[0].SetObserver(rec)
			b.Update(setOf(eps))

			given := monoNow(clk) + int64(7*time.Second) // not what the clock says
			r, err := b.Pick(&Info{})
			if err != nil {
				t.Fatal(err)
			}
			r.Done(endpoint.Outcome{Status: 200, Latency: 5 * time.Millisecond, At: given})
			if got := stampOf(t, b); got != given {
				t.Errorf("with At set, the average is stamped %d; want At = %d (the clock says %d)", got, given, monoNow(clk))
			}

			clk.Advance(10 * time.Second)
			r, err = b.Pick(&Info{})
			if err != nil {
				t.Fatal(err)
			}
			r.Done(endpoint.Outcome{Status: 200, Latency: 5 * time.Millisecond})
			now := monoNow(clk)
			if got := stampOf(t, b); got != now {
				t.Errorf("without At, the average is stamped %d; want the clock's %d", got, now)
			}
			if len(rec.at) != 2 || rec.at[0] != given || rec.at[1] != now {
				t.Errorf("the observer saw At %v; want [%d %d] (the caller's, then the policy's reading)", rec.at, given, now)
			}
		})
	}
}

// p2c_ewma compares two estimates without reading the clock: decaying the
// older one to the newer one's stamp gives the answer that decaying both to
// any later now gives. Checked against load (both decayed to now) on random
// estimates, stamps and in-flight counts, near-ties left out.
func TestP2CEWMACompareNeedsNoNow(t *testing.T) {
	b := NewP2CEWMA(Config{})
	eps := newEndpoints(1, 1)
	b.Update(setOf(eps))
	sides := b.snap.Load().sides
	r := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for range 100_000 {
		for i, s := range sides {
			s.cost.Store(math.Float64bits(float64(r.Int64N(int64(2 * time.Second)))))
			s.stamp.Store(1 + r.Int64N(int64(30*time.Second)))
			for range r.IntN(3) {
				eps[i].Acquire()
			}
		}
		a, c := sides[0], sides[1]
		now := max(a.stamp.Load(), c.stamp.Load()) + r.Int64N(int64(20*time.Second))
		la, lc := a.load(now), c.load(now)
		if math.Abs(lc*1.01-la) > 1e-9*la { // not a near-tie
			checked++
			if got, want := c.below(a), lc*1.01 < la; got != want {
				t.Fatalf("below = %v, loads as of now say %v (costs %v %v, stamps %d %d, in flight %d %d)", got, want,
					math.Float64frombits(c.cost.Load()), math.Float64frombits(a.cost.Load()), c.stamp.Load(), a.stamp.Load(), eps[1].InFlight(), eps[0].InFlight())
			}
		}
		for i := range eps {
			for eps[i].InFlight() > 0 {
				eps[i].Release(endpoint.Outcome{})
			}
		}
	}
	if checked < 90_000 {
		t.Fatalf("only %d of 100000 draws were not near-ties", checked)
	}
}

// An endpoint never observed costs ErrorPenalty per request in flight, a
// cost that does not decay: it is compared with the other endpoint's
// estimate decayed to the clock's now.
func TestP2CEWMAComparesAnUnobservedEndpointAsOfNow(t *testing.T) {
	b := NewP2CEWMA(Config{ErrorPenalty: time.Second})
	clk := useFakeClock(b)
	eps := newEndpoints(1, 1)
	b.Update(setOf(eps))
	sides := b.snap.Load().sides
	observed, fresh := sides[0], sides[1]
	observed.observe(monoNow(clk), &endpoint.Outcome{Status: 200, Latency: 3 * time.Second})
	eps[1].Acquire() // fresh: 1s, one request in flight
	if !fresh.below(observed) {
		t.Fatalf("an unobserved endpoint with one request in flight (1s) is not below a 3s estimate observed just now")
	}
	// Two decay windows on, 3s has decayed to 0.41s: below the penalty.
	clk.Advance(20 * time.Second)
	if fresh.below(observed) || !observed.below(fresh) {
		t.Fatalf("20s later the 3s estimate (now ~0.41s) should be below the unobserved endpoint's 1s penalty")
	}
}
