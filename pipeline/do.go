package pipeline

import (
	"errors"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/ratelimit"
)

// Do runs c through the route: rate limits, the concurrency limit, the
// breaker, the attempts over the upstream and, when they fail, the
// fallback chain. It returns the response to relay (the upstream's, or a
// fallback step's when c.Degraded()), or an *Error. The caller relays the
// response, closes its body and then calls c.Finish, which it must also
// call after an error (deferred, so that a panic in between gives back
// the concurrency slots too). A Call serves one request: Do starts it
// afresh.
//
// Do drives the same steps as Begin, blocking: it sends each attempt
// through the route's Transport, sleeps through each wait and does each
// blocking part in place.
func (r *Route) Do(c *Call, now time.Time) (*http.Response, error) {
	s := r.Begin(c, now)
	for {
		switch s {
		case StepSend:
			ep, deadline, body := c.Attempt()
			resp, err := r.t.RoundTrip(c.Req.Context(), deadline, ep, c, body)
			s = c.Answered(resp, err, monoNow())
		case StepWait:
			// Cut short when the context ends: Resume sees that.
			ratelimit.Sleep(c.Req.Context(), time.Until(c.WaitUntil()))
			s = c.Resume(monoNow())
		case StepBlock:
			s = c.Block()
		default:
			return c.Result()
		}
	}
}

// monoNow is the time now, from one reading of the monotonic clock (its
// wall reading is derived from it): time.Now reads the wall clock as well,
// which costs as much again where reading the clock is slow (on this
// project's VMs time.Now took 45% of BenchmarkDo's CPU).
func monoNow() time.Time { return clock.Time(clock.NowNanos(clock.Real)) }

// checkBreaker asks the route's breaker, if any, whether the upstream may
// be called; while it is open the fallback chain answers.
func (c *Call) checkBreaker(now time.Time) Step {
	r := c.route
	if r.brk != nil {
		t, err := r.brk.Allow(now)
		if err != nil {
			// Open: the upstream is not touched at all.
			return c.fallBack(fallback.BreakerOpen, now)
		}
		c.ticket = t
	}
	return c.startAttempts(now)
}

var (
	errUpstreamBody = errors.New("upstream broke off the response body")
	errDegraded     = errors.New("upstream failed; a fallback step answered")
)

// Finish ends c once its response has been relayed (or its error
// answered): status is what the caller got (StatusClientClosed when it
// went away first), and bodyErr the error that cut the upstream's
// response body short, if any. It reports the endpoint's outcome (passive
// health, latency, load), the route breaker's, stores a good response for
// the stale fallback step and gives back the concurrency slots. Calls
// after the first, and a Finish without Do, do nothing.
func (c *Call) Finish(status int, bodyErr error) {
	if c.route != nil && !c.finished {
		c.FinishAt(status, bodyErr, monoNow())
	}
}

// FinishAt is Finish at now, a reading of the clock the caller has (an
// event loop's), which the outcomes' latencies and the breaker take
// instead of reading it again.
func (c *Call) FinishAt(status int, bodyErr error, now time.Time) {
	r := c.route
	if r == nil || c.finished {
		return
	}
	c.finished = true
	if c.pick.Done != nil {
		// At: latency-aware policies and the endpoint's breaker take this
		// reading instead of reading the clock again.
		o := endpoint.Outcome{Status: c.status, Latency: c.latency, LoadReport: c.load, At: endpoint.NanotimeOf(now)}
		if bodyErr != nil && c.Req.Context().Err() == nil {
			o.Err = errUpstreamBody
		}
		c.pick.Done(o)
		c.pick.Done = nil
	}
	if c.stale != nil && bodyErr == nil && !c.stale.over && c.stale.eof {
		r.fb.Store(cacheKey(c.Req), http.StatusOK, c.stale.header, c.stale.buf.Bytes(), now)
	}
	o := endpoint.Outcome{Status: status, Canceled: status == StatusClientClosed || c.callersFault, Latency: now.Sub(c.start)}
	if c.degraded {
		o.Err = errDegraded
	}
	c.ticket.Done(o, now)
	for i := len(c.release) - 1; i >= 0; i-- {
		if rel := c.release[i]; rel != nil {
			rel()
			c.release[i] = nil
		}
	}
}
