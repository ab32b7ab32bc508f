package pipeline

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// hedgeDelay is how long attempt a may go unanswered before a hedge is
// sent, or 0 for no hedge: only the first attempt of an idempotent call
// without a body (nothing to replay) that switches no protocol is hedged.
func (r *Route) hedgeDelay(c *Call, a *attempt, idempotent bool) time.Duration {
	if r.retry == nil || a.n > 0 || c.Body != nil || !idempotent || c.Upgrade != "" {
		return 0
	}
	after, p95, on := r.retry.Hedge()
	if !on {
		return 0
	}
	if p95 {
		return r.p95.get() // 0 until enough has been seen
	}
	return after
}

// hedged is the end of one of a hedge's two attempts.
type hedged struct {
	resp *http.Response
	err  error
	pick balance.Result
	t0   time.Time
	idx  int
}

// hedge runs attempt a and, if it has no response header after the hedge
// delay (and the retry budget allows), a second one on another endpoint.
// The first response wins and becomes a's; the other attempt is cancelled
// and reported as such (a cancellation says nothing about its endpoint).
func (r *Route) hedge(c *Call, a *attempt, after time.Duration) (*http.Response, error) {
	ctx := c.Req.Context()
	results := make(chan hedged, 2)
	var cancels []context.CancelFunc
	deadline := a.deadline // read once: the attempts must not read a, which the winner rewrites
	launch := func(pick balance.Result, t0 time.Time) {
		actx, cancel := context.WithCancel(ctx)
		idx := len(cancels)
		cancels = append(cancels, cancel)
		go func() {
			resp, err := r.t.RoundTrip(actx, deadline, pick.Endpoint, c, nil)
			results <- hedged{resp, err, pick, t0, idx}
		}()
	}
	launch(a.pick, a.t0)
	pending := 1
	timer := time.NewTimer(after)
	defer timer.Stop()
	var firstErr *hedged
	for {
		select {
		case <-timer.C:
			if pending == 1 && len(cancels) == 1 && r.budget.TryWithdraw(time.Now()) {
				info := c.info
				info.Tried = []*endpoint.Endpoint{a.pick.Endpoint}
				if second, err := r.up.Pick(&info); err == nil && second.Endpoint != a.pick.Endpoint {
					r.m.retried(r.up.Name(), "hedge")
					launch(second, time.Now())
					pending++
					c.attempts++
				} else if err == nil {
					second.Done(endpoint.Outcome{Canceled: true})
				}
			}
			continue
		case h := <-results:
			pending--
			if h.err != nil && pending > 0 {
				// One attempt failed while the other runs: wait for it.
				firstErr = &h
				continue
			}
			// The winner (or the last to fail). The rest is cancelled;
			// whatever it still returns is dropped.
			for i, cancel := range cancels {
				if i != h.idx {
					cancel()
				}
			}
			if pending > 0 {
				go drainHedge(results, pending)
			}
			if firstErr != nil {
				firstErr.pick.Done(endpoint.Outcome{Err: firstErr.err, Latency: time.Since(firstErr.t0)})
			}
			// The winner's context stays live while its body is read; the
			// caller's own context ends it.
			a.pick, a.t0 = h.pick, h.t0
			return h.resp, h.err
		}
	}
}

// drainHedge waits for the n attempts still running after a hedge was
// decided and reports them cancelled.
func drainHedge(results <-chan hedged, n int) {
	for ; n > 0; n-- {
		l := <-results
		if l.resp != nil {
			l.resp.Body.Close()
		}
		l.pick.Done(endpoint.Outcome{Err: context.Canceled, Canceled: true})
	}
}

// p95Tracker keeps a route's recent response-header latencies and their
// 95th percentile, recomputed every 64 samples off a ring of the last 256.
type p95Tracker struct {
	mu    sync.Mutex
	ring  [256]time.Duration
	n, i  int
	since int
	cur   atomic.Int64
}

func (t *p95Tracker) add(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring[t.i] = d
	t.i = (t.i + 1) % len(t.ring)
	if t.n < len(t.ring) {
		t.n++
	}
	if t.since++; t.since < 64 {
		return
	}
	t.since = 0
	s := make([]time.Duration, t.n)
	copy(s, t.ring[:t.n])
	slices.Sort(s)
	t.cur.Store(int64(s[t.n*95/100]))
}

// get returns the latest p95, 0 before 64 samples.
func (t *p95Tracker) get() time.Duration { return time.Duration(t.cur.Load()) }
