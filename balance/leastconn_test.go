package balance

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// holdLoad runs workers goroutines that each make picks picks through b and
// hold each one for a number of scheduler yields (slowHold for slow, 1/10
// of it for the others) before Done. It returns the most requests slow ever
// had in flight, as seen right after picking it.
func holdLoad(b Balancer, slow *endpoint.Endpoint, workers, picks, slowHold int) int64 {
	var maxSlow atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info Info
			for range picks {
				r, err := b.Pick(&info)
				if err != nil {
					panic(err)
				}
				hold := slowHold / 10
				if r.Endpoint == slow {
					hold = slowHold
					if in := slow.InFlight(); in > maxSlow.Load() {
						maxSlow.Store(in) // racy max: a lower bound of the true one, enough for an upper-bound check
					}
				}
				for range hold {
					runtime.Gosched()
				}
				r.Done(endpoint.Outcome{})
			}
		}()
	}
	wg.Wait()
	return maxSlow.Load()
}

// TestLeastConnBoundsSlowEndpointInFlight: 16 workers over 4 endpoints, one
// of which holds requests 10x longer. least_conn only picks the slow one
// when it has the fewest in flight, i.e. at most 15/4 before the pick, so it
// holds at most 4, plus a few for pickers that read the counts at the same
// time (or were descheduled between reading and acquiring). round_robin
// lets it reach nearly all 16.
func TestLeastConnBoundsSlowEndpointInFlight(t *testing.T) {
	const workers, n = 16, 4
	eps := newEndpoints(equalWeights(n)...)
	slow := eps[1]
	lc, _ := New(Config{Policy: LeastConnName}) // the runtime's generator: safe for concurrent use
	lc.Update(setOf(eps))
	got := holdLoad(lc, slow, workers, 2000, 200)
	if bound := int64((workers-1)/n + 4); got > bound {
		t.Errorf("least_conn let the slow endpoint reach %d in flight, want <= %d", got, bound)
	}
	rr, _ := New(Config{Policy: RoundRobinName})
	rr.Update(setOf(eps))
	t.Logf("slow endpoint's peak in flight: least_conn %d, round_robin %d (of %d workers)", got, holdLoad(rr, slow, workers, 2000, 200), workers)
	for _, ep := range eps {
		if ep.InFlight() != 0 {
			t.Fatalf("%s has %d in flight after every Done", ep.Address(), ep.InFlight())
		}
	}
}

// TestLeastConnSamplesLargePools: above lcScanLimit endpoints least_conn
// compares 8 random ones; with half the pool busy, a pick lands on a busy
// one only when all 8 are busy (1/256).
func TestLeastConnSamplesLargePools(t *testing.T) {
	eps := newEndpoints(equalWeights(1000)...)
	busy := map[*endpoint.Endpoint]bool{}
	for _, ep := range eps[:500] {
		ep.Acquire()
		busy[ep] = true
	}
	b := mustNew(t, Config{Policy: LeastConnName}, 1)
	b.Update(setOf(eps))
	hits := 0
	for range 10_000 {
		r, _ := b.Pick(&Info{})
		if busy[r.Endpoint] {
			hits++
		}
		r.Done(endpoint.Outcome{})
	}
	if hits > 100 {
		t.Errorf("%d of 10000 picks went to a busy endpoint, want about 40 (1/256)", hits)
	}
}

func TestLeastConnPrefersLeastLoadedPerWeight(t *testing.T) {
	eps := newEndpoints(3, 1)
	for range 5 {
		eps[0].Acquire() // 5/3 per unit of weight
	}
	eps[1].Acquire() // 1/1
	b := mustNew(t, Config{Policy: LeastConnName}, 1)
	b.Update(setOf(eps))
	r, _ := b.Pick(&Info{})
	if r.Endpoint != eps[1] {
		t.Fatalf("picked %s (5 in flight, weight 3) over %s (1 in flight, weight 1)", r.Endpoint.Address(), eps[1].Address())
	}
	r.Done(endpoint.Outcome{})
	r, _ = b.Pick(&Info{Tried: []*endpoint.Endpoint{eps[1]}})
	if r.Endpoint != eps[0] {
		t.Fatalf("a retry went back to %s, which it tried", r.Endpoint.Address())
	}
	r.Done(endpoint.Outcome{})
}
