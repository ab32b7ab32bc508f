package balance

import (
	"container/heap"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// completion is a held pick that ends at a simulated time.
type completion struct {
	at      int64
	r       Result
	latency time.Duration
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at < c[j].at }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// simulate sends n requests, one every interval of simulated time, through
// b to endpoints whose latencies are given; each pick is held until its
// latency has passed and then reported to Done at that simulated time.
// clk, if not nil, is advanced to the simulated time before every Pick and
// Done. It returns each endpoint's share of the picks.
func simulate(t *testing.T, b Balancer, eps []*endpoint.Endpoint, latency map[*endpoint.Endpoint]time.Duration, n int, interval time.Duration, clk *clock.Fake) []float64 {
	t.Helper()
	var start time.Time
	if clk != nil {
		start = clk.Now()
	}
	advanceTo := func(at int64) {
		if clk != nil {
			clk.Advance(start.Add(time.Duration(at)).Sub(clk.Now()))
		}
	}
	counts := map[*endpoint.Endpoint]int{}
	var pending completions
	now := int64(time.Second)
	for range n {
		for len(pending) > 0 && pending[0].at <= now {
			c := heap.Pop(&pending).(completion)
			advanceTo(c.at)
			c.r.Done(endpoint.Outcome{Latency: c.latency, Status: 200})
		}
		advanceTo(now)
		r, err := b.Pick(&Info{})
		if err != nil {
			t.Fatal(err)
		}
		counts[r.Endpoint]++
		l := latency[r.Endpoint]
		heap.Push(&pending, completion{at: now + int64(l), r: r, latency: l})
		now += int64(interval)
	}
	for len(pending) > 0 {
		c := heap.Pop(&pending).(completion)
		c.r.Done(endpoint.Outcome{Latency: c.latency})
	}
	out := make([]float64, len(eps))
	for i, ep := range eps {
		out[i] = float64(counts[ep]) / float64(n)
	}
	return out
}

// TestP2CEWMAAvoidsTenTimesSlowerEndpoint: five endpoints, one answering in
// 100ms and four in 10ms, 500 requests a second for 200 simulated seconds.
// p2c_ewma sends the slow one under 5% of the traffic; round_robin sends it
// its 1/5.
func TestP2CEWMAAvoidsTenTimesSlowerEndpoint(t *testing.T) {
	eps := newEndpoints(equalWeights(5)...)
	latency := map[*endpoint.Endpoint]time.Duration{}
	for _, ep := range eps {
		latency[ep] = 10 * time.Millisecond
	}
	slow := eps[2]
	latency[slow] = 100 * time.Millisecond

	b := mustNew(t, Config{Policy: P2CEWMAName}, 1)
	clk := useFakeClock(b)
	b.Update(setOf(eps))
	got := simulate(t, b, eps, latency, 100_000, 2*time.Millisecond, clk)
	t.Logf("p2c_ewma shares: %s", pct(got))
	if got[2] >= 0.05 {
		t.Errorf("p2c_ewma sent the 10x slower endpoint %.2f%% of picks, want < 5%% (shares %s)", 100*got[2], pct(got))
	}

	rr := mustNew(t, Config{Policy: RoundRobinName}, 1)
	rr.Update(setOf(eps))
	got = simulate(t, rr, eps, latency, 100_000, 2*time.Millisecond, nil) // round_robin reads no clock
	if math.Abs(got[2]-0.2) > 0.001 {
		t.Errorf("round_robin sent the slow endpoint %.2f%% of picks, want 20%%", 100*got[2])
	}
}

func TestP2CEWMACancellationDoesNotPenalise(t *testing.T) {
	b := NewP2CEWMA(Config{})
	eps := newEndpoints(1)
	b.Update(setOf(eps))
	s := b.snap.Load().sides[0]
	s.observe(1e9, &endpoint.Outcome{Latency: 10 * time.Millisecond})
	before := s.load(1e9)
	s.observe(1e9+1, &endpoint.Outcome{Err: errors.New("context canceled"), Canceled: true, Latency: 30 * time.Second})
	if after := s.load(1e9 + 1); after > before*1.0001 {
		t.Fatalf("a canceled request raised the cost from %.0f to %.0f; cancellations must not count", before, after)
	}
}

func TestP2CEWMAErrorCountsAsPenalty(t *testing.T) {
	b := NewP2CEWMA(Config{ErrorPenalty: 2 * time.Second})
	eps := newEndpoints(1)
	b.Update(setOf(eps))
	s := b.snap.Load().sides[0]
	s.observe(1e9, &endpoint.Outcome{Latency: 10 * time.Millisecond})
	s.observe(1e9+1, &endpoint.Outcome{Err: errors.New("connection refused"), Latency: time.Millisecond})
	if c := s.load(1e9 + 1); c < float64(2*time.Second)*0.999 {
		t.Fatalf("after a failure the cost is %v, want the 2s penalty", time.Duration(c))
	}
	s.observe(1e9+2, &endpoint.Outcome{Status: 503, Latency: time.Millisecond})
	if c := s.load(1e9 + 2); c < float64(2*time.Second)*0.999 {
		t.Fatalf("after a 503 the cost is %v, want the 2s penalty", time.Duration(c))
	}
	// The penalty fades: after five decay windows of silence it is <1%.
	if c := s.load(1e9 + 2 + int64(50*time.Second)); c > float64(2*time.Second)*0.01 {
		t.Fatalf("50s after the failure the cost is still %v", time.Duration(c))
	}
}

// TestP2CEWMATriesNewEndpointButDoesNotFloodIt: a never-observed endpoint
// wins while idle, and loses while its first request is unanswered.
func TestP2CEWMATriesNewEndpointButDoesNotFloodIt(t *testing.T) {
	b := mustNew(t, Config{Policy: P2CEWMAName}, 1).(*P2CEWMA)
	useFakeClock(b) // and never advanced: every Pick and Done at one instant
	eps := newEndpoints(1, 1)
	old, fresh := eps[0], eps[1]
	b.Update(setOf(eps[:1]))
	for range 10 {
		r, _ := b.Pick(&Info{})
		r.Done(endpoint.Outcome{Latency: 10 * time.Millisecond})
	}
	b.Update(setOf(eps))
	var held Result
	for i := 0; held.Endpoint == nil; i++ {
		if i == 20 {
			t.Fatal("the new endpoint was not picked in 20 picks")
		}
		r, _ := b.Pick(&Info{})
		if r.Endpoint == fresh {
			held = r
			continue
		}
		r.Done(endpoint.Outcome{Latency: 10 * time.Millisecond})
	}
	for range 100 {
		r, _ := b.Pick(&Info{})
		if r.Endpoint != old {
			t.Fatal("the new endpoint got a second request before answering its first")
		}
		r.Done(endpoint.Outcome{Latency: 10 * time.Millisecond})
	}
	held.Done(endpoint.Outcome{Latency: 10 * time.Millisecond})
}

func TestP2CEWMAKeepsEstimatesAcrossUpdates(t *testing.T) {
	b := NewP2CEWMA(Config{})
	eps := newEndpoints(1, 1)
	b.Update(setOf(eps))
	s := b.snap.Load().sides[0]
	s.observe(1e9, &endpoint.Outcome{Latency: 42 * time.Millisecond})
	b.Update(&endpoint.Set{All: eps, Ready: eps[1:]}) // eps[0] ejected
	b.Update(setOf(eps))                              // and back
	if got := b.snap.Load().sides[0]; got != s {
		t.Fatal("an endpoint that left the ready set and came back lost its latency estimate")
	}
}
