package pipeline

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
)

// attempt is one try of a call on one endpoint.
type attempt struct {
	n        int // 0 for the first
	pick     balance.Result
	t0       time.Time // when it was sent
	deadline time.Time // per-try; zero for none
	body     io.Reader
}

// attempts sends c to the upstream until an answer is worth relaying or
// no retry is allowed: the one retry loop of every front end.
func (r *Route) attempts(c *Call) (*http.Response, error) {
	pol := r.retry
	idempotent := retry.Retryable(c.Req.Method, c.Req.Header, pol != nil && pol.RetryNonIdempotent)
	buffered, isBuffered := c.Body.(BufferedBody)
	if pol != nil {
		r.budget.Deposit(c.start)
		if c.Body != nil && idempotent && !isBuffered {
			// Kept while it is first sent (never read ahead), so that it
			// can go again; past body_limit it cannot.
			c.rb = retry.NewReplayableBody(io.NopCloser(c.Body), pol.BodyLimit)
		}
	}
	if c.HasHashKey {
		c.info.Key, c.info.HasKey = c.HashKey, true
	} else if k := r.up.HashKey(); k != nil {
		c.info.Key, c.info.HasKey = k.FromRequest(c.Req)
	}
	c.info.Prefer = c.Prefer
	for n := 0; ; n++ {
		a := attempt{n: n, body: c.Body}
		if isBuffered {
			a.body = buffered.NewReader()
		} else if c.rb != nil {
			rd, err := c.rb.NewReader()
			if err != nil { // retries check Replayable first
				return nil, &Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Err: err,
					Msg: "upstream " + r.up.Name() + ": the request body cannot be sent again"}
			}
			a.body = rd
		}
		pick, err := r.up.Pick(&c.info)
		if err == balance.ErrNoHashKey {
			c.callersFault = true
			return nil, r.noHashKey()
		}
		if err != nil {
			return r.noEndpoint(c)
		}
		a.pick, a.t0 = pick, c.start
		if n > 0 {
			a.t0 = time.Now()
		}
		a.deadline = c.deadline
		if pol != nil && pol.PerTryTimeout > 0 {
			if d := a.t0.Add(pol.PerTryTimeout); a.deadline.IsZero() || d.Before(a.deadline) {
				a.deadline = d
			}
		}
		resp, err := r.send(c, &a, idempotent)
		c.last = a.pick.Endpoint
		if err != nil {
			if r.retryAfterError(c, &a, err, idempotent) {
				continue
			}
			return r.failed(c, a.pick.Endpoint, err)
		}
		if r.p95 != nil {
			r.p95.add(time.Since(a.t0))
		}
		if again, err := r.retryStatus(c, &a, resp, idempotent); again {
			continue
		} else if err != nil {
			return nil, err
		}
		return r.answered(c, &a, resp)
	}
}

// send makes attempt a: hedged when the policy asks for it, else plainly.
func (r *Route) send(c *Call, a *attempt, idempotent bool) (*http.Response, error) {
	if after := r.hedgeDelay(c, a, idempotent); after > 0 {
		return r.hedge(c, a, after)
	}
	return r.t.RoundTrip(c.Req.Context(), a.deadline, a.pick.Endpoint, c, a.body)
}

// answered takes the response of attempt a as the call's: a fallback
// trigger on its status, the stale copy and the load report.
func (r *Route) answered(c *Call, a *attempt, resp *http.Response) (*http.Response, error) {
	c.latency = time.Since(a.t0)
	if h := r.up.LoadHeader(); h != "" {
		if v, ok := resp.Header[h]; ok {
			if len(v) > 0 {
				c.load = v[0]
			}
			delete(resp.Header, h)
		}
	}
	if r.fb != nil && resp.StatusCode != http.StatusSwitchingProtocols && r.fb.Triggers().OnStatus(resp.StatusCode) {
		if fresp, ok := r.degrade(c, fallback.StatusCode, fallback.StatusReason(resp.StatusCode)); ok {
			resp.Body.Close()
			a.pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: c.latency, LoadReport: c.load})
			return fresp, nil
		}
	}
	c.pick, c.status = a.pick, resp.StatusCode
	if r.fb != nil && r.fb.Cache() != nil && c.Req.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		// A good answer is kept for the stale step, if small enough.
		c.stale = &staleRecorder{max: r.staleMax, header: resp.Header.Clone(), body: resp.Body}
		resp.Body = c.stale
	}
	return resp, nil
}

// noHashKey is the error for a call without the hash key that the
// upstream's policy requires (missing_key: error): the caller's to fix, so
// no fallback answers it.
func (r *Route) noHashKey() *Error {
	where := ""
	if k := r.up.HashKey(); k != nil {
		where = " (" + k.String() + ")"
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeHashKeyMissing, Err: balance.ErrNoHashKey,
		Msg: "upstream " + r.up.Name() + " needs a hash key" + where + " and the request has none"}
}

// noEndpoint answers a call when the upstream has no endpoint to pick.
func (r *Route) noEndpoint(c *Call) (*http.Response, error) {
	if resp, ok := r.degrade(c, fallback.NoHealthyEndpoint, fallback.NoHealthyEndpoint.String()); ok {
		return resp, nil
	}
	return nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeNoEndpoint,
		Msg: "upstream " + r.up.Name() + " has no endpoint that can take traffic"}
}

// retryAfterError reports a failed attempt to its endpoint and decides
// whether to try again (after the backoff, which it waits).
//
// A connect failure sent nothing and is always safe to retry. Without a
// policy, an exchange that broke before any response byte is retried too
// when the request can be sent again (idempotent, no body): an endpoint
// shutting down resets the connections in its accept queue, and a GET that
// met one must not fail for it. nginx's default proxy_next_upstream
// (error) does the same for idempotent requests; a timeout is not retried
// (a slow endpoint would get the load twice), and neither is a call when
// no other endpoint can take it. Anything else needs a policy that retries
// it, an idempotent request and a body that can be sent again; every retry
// under a policy is paid from the route's budget.
func (r *Route) retryAfterError(c *Call, a *attempt, err error, idempotent bool) bool {
	ctx := c.Req.Context()
	clientGone := ctx.Err() != nil
	a.pick.Done(endpoint.Outcome{Err: err, Latency: time.Since(a.t0), Canceled: clientGone || errors.Is(err, ErrRequestBody)})
	c.tried = append(c.tried, a.pick.Endpoint)
	c.info.Tried = c.tried
	reason := r.retryReason(c, a, err, idempotent, clientGone)
	if reason == "" {
		return false
	}
	r.m.upstreamError(r.up.Name(), a.pick.Endpoint.Address(), errorKind(reason, err))
	return r.backoff(ctx, c, a.n, reason)
}

// retryReason says why a failed attempt may be tried again ("connect",
// "reset", "timeout"), or "" when it may not.
func (r *Route) retryReason(c *Call, a *attempt, err error, idempotent, clientGone bool) string {
	pol := r.retry
	maxAttempts := 2 // without a policy: one more try after a connect failure or a broken idempotent exchange
	if pol != nil {
		maxAttempts = pol.Attempts
	}
	if clientGone || a.n+1 >= maxAttempts || errors.Is(err, ErrRequestBody) {
		return ""
	}
	now := time.Now()
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		return "" // the route's own time is up
	}
	isConnect := retry.Classify(err) == retry.ConnectFailure
	if pol == nil {
		switch {
		case !r.up.Untried(c.tried):
			return ""
		case isConnect:
			return "connect"
		case c.replayable(idempotent) && !isTimeout(err):
			return "reset"
		}
		return ""
	}
	reason := "connect"
	if !isConnect {
		if !pol.RetryError(err) || !idempotent || (c.rb != nil && !c.rb.Replayable()) {
			return ""
		}
		reason = "reset"
		if isTimeout(err) {
			reason = "timeout"
		}
	} else if !pol.RetryError(err) {
		return ""
	}
	if !r.budget.TryWithdraw(now) {
		r.m.retried(r.up.Name(), "budget_exhausted")
		return ""
	}
	return reason
}

// retryStatus decides whether a response's status is worth another try;
// if so the response is dropped unseen and the backoff waited. err is set
// when the retry was due but no time is left for it.
func (r *Route) retryStatus(c *Call, a *attempt, resp *http.Response, idempotent bool) (again bool, err error) {
	pol := r.retry
	if pol == nil || !pol.RetryStatus(resp.StatusCode) || a.n+1 >= pol.Attempts || !idempotent ||
		(c.rb != nil && !c.rb.Replayable()) || !r.budget.TryWithdraw(time.Now()) {
		return false, nil
	}
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
	a.pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: time.Since(a.t0)})
	c.tried = append(c.tried, a.pick.Endpoint)
	c.info.Tried = c.tried
	if r.backoff(c.Req.Context(), c, a.n, "status") {
		return true, nil
	}
	return false, &Error{Status: http.StatusGatewayTimeout, Code: CodeUpstreamTimeout,
		Msg: "upstream " + r.up.Name() + ": no time left to retry"}
}

// backoff counts a retry and waits its backoff (full jitter). It reports
// false when the caller went away or the call's deadline would pass.
func (r *Route) backoff(ctx context.Context, c *Call, n int, reason string) bool {
	label := reason
	if reason == "connect" {
		label = "connect_failure"
	}
	r.m.retried(r.up.Name(), label)
	if r.retry == nil {
		return true
	}
	d := r.retry.Backoff(n, nil)
	if !c.deadline.IsZero() && time.Now().Add(d).After(c.deadline) {
		return false
	}
	return ratelimit.Sleep(ctx, d) == nil
}

// failed answers a call whose last attempt failed before a response: the
// fallback chain when the upstream is to blame, else the error.
func (r *Route) failed(c *Call, ep *endpoint.Endpoint, err error) (*http.Response, error) {
	ctx := c.Req.Context()
	var mbe *http.MaxBytesError
	if ctx.Err() == nil && !errors.Is(err, ErrRequestBody) && !errors.As(err, &mbe) {
		// Every attempt failed at the transport level.
		if resp, ok := r.degrade(c, fallback.RetriesExhausted, fallback.RetriesExhausted.String()); ok {
			return resp, nil
		}
	}
	up, addr := r.up.Name(), ep.Address()
	switch {
	case errors.As(err, &mbe):
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Err: err,
			Msg: "request body exceeds max_body_bytes " + strconv.FormatInt(mbe.Limit, 10)}
	case errors.Is(err, ErrRequestBody) && isTimeout(err):
		// Before the caller's context: a server may end the context
		// because the body stopped coming, and the caller is owed a 408.
		return nil, &Error{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout, Err: err, Msg: "the request body stopped coming"}
	case ctx.Err() != nil:
		return nil, clientClosed(err)
	case errors.Is(err, ErrRequestBody):
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Err: err, Msg: "could not read the request body"}
	case retry.Classify(err) == retry.ConnectFailure:
		r.m.upstreamError(up, addr, errorKind("connect", err))
		return nil, &Error{Status: http.StatusBadGateway, Code: CodeConnectFailed, Err: err, Msg: "upstream " + up + ": could not connect to " + addr}
	case isTimeout(err):
		r.m.upstreamError(up, addr, "timeout")
		return nil, &Error{Status: http.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Err: err, Msg: "upstream " + up + ": " + addr + " did not answer in time"}
	}
	r.m.upstreamError(up, addr, "reset")
	return nil, &Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Err: err, Msg: "upstream " + up + ": " + addr + " broke the exchange"}
}

// replayable reports whether the call may be sent again after an exchange
// broke: it has no body (or one held whole), switches no protocol, and is
// idempotent.
func (c *Call) replayable(idempotent bool) bool {
	if c.Body != nil {
		if _, ok := c.Body.(BufferedBody); !ok {
			return false
		}
	}
	return c.Upgrade == "" && idempotent
}

// errorKind is the kind label of a failed attempt in the upstream error
// metric: a connect failure that was a TLS handshake's is counted as
// "tls", so that a certificate problem is told apart from a dead port.
func errorKind(kind string, err error) string {
	if kind == "connect" && errors.Is(err, retry.ErrTLSHandshake) {
		return "tls"
	}
	return kind
}

// isTimeout reports whether an attempt ran out of time.
func isTimeout(err error) bool { return retry.Classify(err) == retry.Timeout }
