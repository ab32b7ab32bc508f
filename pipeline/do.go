package pipeline

import (
	"errors"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
)

// Do runs c through the route: rate limits, the concurrency limit, the
// breaker, the attempts over the upstream and, when they fail, the
// fallback chain. It returns the response to relay (the upstream's, or a
// fallback step's when c.Degraded()), or an *Error. The caller relays the
// response, closes its body and then calls c.Finish, which it must also
// call after an error (deferred, so that a panic in between gives back
// the concurrency slots too). A Call serves one request: Do starts it
// afresh.
func (r *Route) Do(c *Call, now time.Time) (*http.Response, error) {
	*c = Call{Req: c.Req, Body: c.Body, Upgrade: c.Upgrade, HashKey: c.HashKey, HasHashKey: c.HasHashKey, Prefer: c.Prefer, Front: c.Front, route: r, start: now}
	if r.cfg.Timeout > 0 {
		c.deadline = now.Add(r.cfg.Timeout)
	}
	if len(r.limiters) > 0 {
		if err := r.admit(c); err != nil {
			return nil, err
		}
	}
	if err := r.enter(c); err != nil {
		return nil, err
	}
	if r.brk != nil {
		t, err := r.brk.Allow(now)
		if err != nil {
			// Open: the upstream is not touched at all.
			if resp, ok := r.degrade(c, fallback.BreakerOpen, fallback.BreakerOpen.String()); ok {
				return resp, nil
			}
			return nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeBreakerOpen, Msg: "route " + r.name + ": circuit breaker open"}
		}
		c.ticket = t
	}
	return r.attempts(c)
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
	r := c.route
	if r == nil || c.finished {
		return
	}
	c.finished = true
	now := time.Now()
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
