package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
)

// fallBack answers c through the route's fallback chain for trigger t
// (for StatusCode, on behalf of c.held), or as it would be answered
// without one when the chain does not take t or no step serves. A chain
// with a backup step sends a request: then the chain is Block's.
func (c *Call) fallBack(t fallback.Trigger, now time.Time) Step {
	r := c.route
	// A status trigger was checked by the caller (Triggers.OnStatus).
	if r.fb == nil || (t != fallback.StatusCode && !r.fb.Triggers().On(t)) {
		return c.unanswered(t)
	}
	c.trigger = t
	if r.fbBlocks {
		return c.block(blockFallback)
	}
	return c.serveFallback(now)
}

// serveFallback runs the fallback chain for c.trigger.
func (c *Call) serveFallback(now time.Time) Step {
	r := c.route
	reason := c.trigger.String()
	if c.trigger == fallback.StatusCode {
		reason = fallback.StatusReason(c.held.StatusCode)
	}
	resp, step, err := r.fb.Serve(c.Req.Context(), c.Req, cacheKey(c.Req), reason, now)
	if err != nil {
		r.log.Debug("fallback chain failed", "route", r.name, "reason", reason, "error", err)
		return c.unanswered(c.trigger)
	}
	r.m.fellBack(r.name, step, reason)
	c.degraded = true
	if held := c.held; held != nil {
		// The upstream's answer gives way to the chain's.
		c.held = nil
		held.Body.Close()
		c.att.pick.Done(endpoint.Outcome{Status: held.StatusCode, Latency: c.latency, LoadReport: c.load})
	}
	return c.answer(resp)
}

// unanswered is how a call ends when the fallback chain did not answer
// for trigger t: with the error of what triggered it, or, for a status,
// with the upstream's response after all.
func (c *Call) unanswered(t fallback.Trigger) Step {
	r := c.route
	switch t {
	case fallback.BreakerOpen:
		return c.fail(&Error{Status: http.StatusServiceUnavailable, Code: CodeBreakerOpen, Msg: "route " + r.name + ": circuit breaker open"})
	case fallback.NoHealthyEndpoint:
		return c.fail(&Error{Status: http.StatusServiceUnavailable, Code: CodeNoEndpoint,
			Msg: "upstream " + r.up.Name() + " has no endpoint that can take traffic"})
	case fallback.StatusCode:
		held := c.held
		c.held = nil
		return c.relay(held)
	}
	return c.fail(c.failedError())
}

// cacheKey is the stale cache's key for a request.
func cacheKey(r *http.Request) string { return r.Method + " " + r.Host + r.URL.RequestURI() }

// sendBackup sends a body-less copy of req to one endpoint of the named
// upstream (a backup step).
func (r *Route) sendBackup(ctx context.Context, name string, req *http.Request) (*http.Response, error) {
	if r.backups == nil {
		return nil, errors.New("no upstream " + name)
	}
	up, t, ok := r.backups(name)
	if !ok {
		return nil, errors.New("no upstream " + name)
	}
	var info balance.Info
	pick, err := up.Pick(&info)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	resp, err := t.RoundTrip(ctx, time.Time{}, pick.Endpoint, &Call{Req: req}, nil)
	if err != nil {
		pick.Done(endpoint.Outcome{Err: err, Latency: time.Since(t0)})
		return nil, err
	}
	pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: time.Since(t0)})
	return resp, nil
}

// staleRecorder is a good response's body, teed for the stale step up to
// max bytes; past that it gives up. Finish stores what it recorded if the
// body was read to its end.
type staleRecorder struct {
	body   io.ReadCloser
	header http.Header
	buf    bytes.Buffer
	max    int64
	over   bool
	eof    bool
}

func (s *staleRecorder) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 && !s.over {
		if int64(s.buf.Len()+n) > s.max {
			s.over = true
			s.buf = bytes.Buffer{}
		} else {
			s.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

func (s *staleRecorder) Close() error { return s.body.Close() }
