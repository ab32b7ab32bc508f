package pipeline

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
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

// startAttempts readies c for its attempts (the retry budget, a body kept
// for retries, the hash key) and makes the first: the one retry loop of
// every front end runs from here, through sent, until an answer is worth
// relaying or no retry is allowed.
func (c *Call) startAttempts(now time.Time) Step {
	r := c.route
	pol := r.retry
	c.idempotent = retry.Retryable(c.Req.Method, c.Req.Header, pol != nil && pol.RetryNonIdempotent)
	if pol != nil {
		r.budget.Deposit(c.start)
		if _, isBuffered := c.Body.(BufferedBody); c.Body != nil && c.idempotent && !isBuffered {
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
	return c.attempt(0, now)
}

// attempt makes attempt n of c at now: a body to send, an endpoint (one
// not tried yet first), the deadline. A hedged attempt is Block's.
func (c *Call) attempt(n int, now time.Time) Step {
	r := c.route
	a := &c.att
	*a = attempt{n: n, body: c.Body}
	if buffered, ok := c.Body.(BufferedBody); ok {
		a.body = buffered.NewReader()
	} else if c.rb != nil {
		rd, err := c.rb.NewReader()
		if err != nil { // retries check Replayable first
			return c.fail(&Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Err: err,
				Msg: "upstream " + r.up.Name() + ": the request body cannot be sent again"})
		}
		a.body = rd
	}
	pick, err := r.up.Pick(&c.info)
	if err == balance.ErrNoHashKey {
		c.callersFault = true
		return c.fail(r.noHashKey())
	}
	if err != nil {
		return c.fallBack(fallback.NoHealthyEndpoint, now)
	}
	a.pick, a.t0 = pick, now
	a.deadline = c.deadline
	if pol := r.retry; pol != nil && pol.PerTryTimeout > 0 {
		if d := a.t0.Add(pol.PerTryTimeout); a.deadline.IsZero() || d.Before(a.deadline) {
			a.deadline = d
		}
	}
	c.attempts++
	if after := r.hedgeDelay(c, a, c.idempotent); after > 0 {
		c.hedgeAfter = after
		return c.block(blockHedge)
	}
	c.next = awaitAnswer
	return StepSend
}

// sent goes on from the outcome of attempt c.att, which came at now: a
// retry, the fallback chain, or the answer.
func (c *Call) sent(resp *http.Response, err error, now time.Time) Step {
	r := c.route
	a := &c.att
	c.last = a.pick.Endpoint
	if err != nil {
		reason := c.retryAfterError(err, now)
		if reason == "" {
			return c.failed(err, now)
		}
		r.m.upstreamError(r.up.Name(), a.pick.Endpoint.Address(), errorKind(reason, err))
		c.err = err
		return c.backoff(reason, now)
	}
	if r.p95 != nil {
		r.p95.add(now.Sub(a.t0))
	}
	if c.retryStatus(resp, now) {
		c.err = nil
		return c.backoff("status", now)
	}
	return c.answered(resp, now)
}

// answered takes the response of attempt c.att as the call's: a fallback
// trigger on its status, the stale copy and the load report.
func (c *Call) answered(resp *http.Response, now time.Time) Step {
	r := c.route
	c.latency = now.Sub(c.att.t0)
	if h := r.up.LoadHeader(); h != "" {
		if v, ok := resp.Header[h]; ok {
			if len(v) > 0 {
				c.load = v[0]
			}
			delete(resp.Header, h)
		}
	}
	if r.fb != nil && resp.StatusCode != http.StatusSwitchingProtocols && r.fb.Triggers().OnStatus(resp.StatusCode) {
		c.held = resp
		return c.fallBack(fallback.StatusCode, now)
	}
	return c.relay(resp)
}

// relay makes resp, the upstream's answer to attempt c.att, the call's.
func (c *Call) relay(resp *http.Response) Step {
	r := c.route
	c.pick, c.status = c.att.pick, resp.StatusCode
	if r.fb != nil && r.fb.Cache() != nil && c.Req.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		// A good answer is kept for the stale step, if small enough.
		c.stale = &staleRecorder{max: r.staleMax, header: resp.Header.Clone(), body: resp.Body}
		resp.Body = c.stale
	}
	return c.answer(resp)
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

// retryAfterError reports a failed attempt to its endpoint and says why
// it may be tried again ("connect", "reset", "timeout"), or "" when it may
// not.
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
func (c *Call) retryAfterError(err error, now time.Time) string {
	a := &c.att
	clientGone := c.Req.Context().Err() != nil
	a.pick.Done(endpoint.Outcome{Err: err, Latency: now.Sub(a.t0), Canceled: clientGone || errors.Is(err, ErrRequestBody)})
	c.tried = append(c.tried, a.pick.Endpoint)
	c.info.Tried = c.tried
	if clientGone {
		return ""
	}
	return c.route.retryReason(c, err, now)
}

// retryReason says why attempt c.att, failed with err, may be tried again
// ("connect", "reset", "timeout"), or "" when it may not.
func (r *Route) retryReason(c *Call, err error, now time.Time) string {
	pol := r.retry
	maxAttempts := 2 // without a policy: one more try after a connect failure or a broken idempotent exchange
	if pol != nil {
		maxAttempts = pol.Attempts
	}
	if c.att.n+1 >= maxAttempts || errors.Is(err, ErrRequestBody) {
		return ""
	}
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
		case c.replayable(c.idempotent) && !isTimeout(err):
			return "reset"
		}
		return ""
	}
	reason := "connect"
	if !isConnect {
		if !pol.RetryError(err) || !c.idempotent || (c.rb != nil && !c.rb.Replayable()) {
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

// retryStatus decides whether the status of resp, attempt c.att's
// answer, is worth another try; if so the response is dropped unseen
// (after reading at most 64 KiB of its body, so that its connection may
// serve again) and reported to its endpoint.
func (c *Call) retryStatus(resp *http.Response, now time.Time) bool {
	r := c.route
	a := &c.att
	pol := r.retry
	if pol == nil || !pol.RetryStatus(resp.StatusCode) || a.n+1 >= pol.Attempts || !c.idempotent ||
		(c.rb != nil && !c.rb.Replayable()) || !r.budget.TryWithdraw(now) {
		return false
	}
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
	a.pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: now.Sub(a.t0)})
	c.tried = append(c.tried, a.pick.Endpoint)
	c.info.Tried = c.tried
	return true
}

// backoff counts a retry of attempt c.att and returns the step that makes
// it: at once without a policy, else after a backoff (full jitter) as a
// wait, unless the call's deadline would pass first.
func (c *Call) backoff(reason string, now time.Time) Step {
	r := c.route
	label := reason
	if reason == "connect" {
		label = "connect_failure"
	}
	r.m.retried(r.up.Name(), label)
	if r.retry == nil {
		return c.attempt(c.att.n+1, now)
	}
	d := r.retry.Backoff(c.att.n, nil)
	if !c.deadline.IsZero() && now.Add(d).After(c.deadline) {
		return c.noRetry(now)
	}
	if d <= 0 {
		return c.retryNow(now)
	}
	c.next = resumeRetry
	return c.wait(now.Add(d))
}

// retryNow makes the retry whose backoff was waited, unless the caller
// went away meanwhile.
func (c *Call) retryNow(now time.Time) Step {
	if c.Req.Context().Err() != nil {
		return c.noRetry(now)
	}
	return c.attempt(c.att.n+1, now)
}

// noRetry ends a call whose retry cannot be made (no time left, or the
// caller gone): as a failed call after an error, 504 after a status.
func (c *Call) noRetry(now time.Time) Step {
	if c.err != nil {
		return c.failed(c.err, now)
	}
	return c.fail(&Error{Status: http.StatusGatewayTimeout, Code: CodeUpstreamTimeout,
		Msg: "upstream " + c.route.up.Name() + ": no time left to retry"})
}

// failed answers a call whose last attempt failed with err before a
// response: the fallback chain when the upstream is to blame, else the
// error.
func (c *Call) failed(err error, now time.Time) Step {
	c.err = err
	var mbe *http.MaxBytesError
	if c.Req.Context().Err() == nil && !errors.Is(err, ErrRequestBody) && !errors.As(err, &mbe) {
		// Every attempt failed at the transport level.
		return c.fallBack(fallback.RetriesExhausted, now)
	}
	return c.fail(c.failedError())
}

// failedError is the error of a call whose last attempt, on c.last,
// failed with c.err before a response, when no fallback step answered.
func (c *Call) failedError() *Error {
	r, err := c.route, c.err
	up, addr := r.up.Name(), c.last.Address()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Err: err,
			Msg: "request body exceeds max_body_bytes " + strconv.FormatInt(mbe.Limit, 10)}
	case errors.Is(err, ErrRequestBody) && isTimeout(err):
		// Before the caller's context: a server may end the context
		// because the body stopped coming, and the caller is owed a 408.
		return &Error{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout, Err: err, Msg: "the request body stopped coming"}
	case c.Req.Context().Err() != nil:
		return clientClosed(err)
	case errors.Is(err, ErrRequestBody):
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Err: err, Msg: "could not read the request body"}
	case retry.Classify(err) == retry.ConnectFailure:
		r.m.upstreamError(up, addr, errorKind("connect", err))
		return &Error{Status: http.StatusBadGateway, Code: CodeConnectFailed, Err: err, Msg: "upstream " + up + ": could not connect to " + addr}
	case isTimeout(err):
		r.m.upstreamError(up, addr, "timeout")
		return &Error{Status: http.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Err: err, Msg: "upstream " + up + ": " + addr + " did not answer in time"}
	}
	r.m.upstreamError(up, addr, "reset")
	return &Error{Status: http.StatusBadGateway, Code: CodeUpstreamError, Err: err, Msg: "upstream " + up + ": " + addr + " broke the exchange"}
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
