package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// RoundTrip implements http.RoundTripper. A request to a declared service
// (its URL's host) goes through the service's route that matches it:
// rate limits, concurrency, breaker, attempts on the upstream's endpoints
// with retries and hedging, and the fallback chain. The response is the
// endpoint's, or a fallback step's (Degraded reports it); its body must be
// read to the end or closed, as always with net/http: that is when the
// call's outcome is reported (passive health, breakers, the stale cache)
// and its concurrency slots are given back.
//
// When no response could be had the error is a *pipeline.Error, with the
// HTTP status the proxy would have answered, a stable Code and, for a
// limit, how long to wait (RetryAfter); get at it with errors.As (an
// http.Client wraps it in a *url.Error). When the request's context ended
// the error also wraps the context's error. A request to a host that is
// not a declared service goes to the base RoundTripper (WithBase), or
// fails with an *UnknownServiceError.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	s := c.lookup(req.URL.Host)
	if s == nil {
		if c.base != nil {
			return c.base.RoundTrip(req)
		}
		closeBody(req)
		return nil, &UnknownServiceError{Host: req.URL.Host, Known: c.Services()}
	}
	if req.URL.Scheme != "http" {
		closeBody(req)
		return nil, fmt.Errorf("%w, not %s://%s", ErrScheme, req.URL.Scheme, req.URL.Host)
	}
	if err := s.await(req.Context()); err != nil {
		closeBody(req)
		return nil, err
	}
	rt := s.pick(req)
	st := &callState{route: rt}
	st.call.Req, st.call.Front = req, st
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody != nil {
			// The body can be had again: every attempt may send it.
			st.call.Body = &replayBody{req: req}
		} else {
			st.call.Body = req.Body
		}
	}
	if req.Header.Get("Upgrade") != "" && hasToken(req.Header["Connection"], "upgrade") {
		st.call.Upgrade = req.Header.Get("Upgrade")
	}
	ctx := req.Context()
	st.call.HashKey, st.call.HasHashKey = balance.HashKeyFrom(ctx)
	st.start = time.Now()
	rt.m.Start()
	resp, err := rt.p.Do(&st.call, st.start)
	if err != nil {
		status := http.StatusBadGateway
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			status = pe.Status
			if pe.Code == pipeline.CodeRateLimited && pe.RetryAfter == 0 {
				// One field to read for every limit.
				pe.RetryAfter = pe.Limit.RetryAfter
			}
		}
		if ctx.Err() != nil {
			status = pipeline.StatusClientClosed
			if !errors.Is(err, ctx.Err()) {
				err = &ctxError{err: err, ctx: context.Cause(ctx)}
			}
		}
		st.finish(status, nil)
		return nil, err
	}
	st.status = int32(resp.StatusCode)
	st.body = resp.Body
	resp.Body = st
	if rw, ok := st.body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// A switched protocol (WebSocket) writes to the body too; the call
		// lasts until it is closed.
		resp.Body = upgraded{st, rw}
	}
	resp.Request = req
	return resp, nil
}

// upgraded is the body of a response that switched protocols: the
// connection, read and written, whose Close finishes the call.
type upgraded struct {
	*callState
	w io.Writer
}

func (u upgraded) Write(p []byte) (int, error) { return u.w.Write(p) }

// hasToken reports whether a comma-separated header holds token, in any
// case.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// lookup finds the service a URL host names.
func (c *Client) lookup(host string) *service {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	if s := c.services[host]; s != nil {
		return s
	}
	return c.services[strings.ToLower(host)]
}

// callState is one call's state, one allocation: the pipeline's Call, and
// the response body the caller reads, whose end finishes the call.
type callState struct {
	call   pipeline.Call
	route  *route
	body   io.ReadCloser
	start  time.Time
	status int32
	done   atomic.Bool
	// taken tells whether an attempt has first, the first attempt's
	// request, allocated with the call (retries and hedges allocate their
	// own).
	taken atomic.Bool
	first attemptReq
}

// Read reads the response body; its end (or a failure) finishes the call.
func (st *callState) Read(p []byte) (int, error) {
	n, err := st.body.Read(p)
	if err != nil {
		if err == io.EOF {
			st.finish(int(st.status), nil)
		} else {
			st.finishErr(err)
		}
	}
	return n, err
}

// Close closes the response body and finishes the call, if reading it did
// not already.
func (st *callState) Close() error {
	err := st.body.Close()
	st.finish(int(st.status), nil)
	return err
}

// finishErr finishes a call whose response body broke off.
func (st *callState) finishErr(err error) {
	if st.call.Req.Context().Err() != nil {
		st.finish(pipeline.StatusClientClosed, err)
		return
	}
	st.finish(int(st.status), err)
}

// takeFirst hands the first attempt the request kept in the call's state.
func (st *callState) takeFirst() *attemptReq {
	if st.taken.CompareAndSwap(false, true) {
		return &st.first
	}
	return nil
}

// finish reports the call's outcome once.
func (st *callState) finish(status int, bodyErr error) {
	if !st.done.CompareAndSwap(false, true) {
		return
	}
	st.call.Finish(status, bodyErr)
	closeBody(st.call.Req)
	st.route.m.Done(status, time.Since(st.start).Seconds())
}

// closeBody closes a request's body, as a RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// replayBody is a request body that net/http can produce again
// (Request.GetBody: bytes, strings, a bytes.Reader): the first attempt
// reads the request's own body, a retry a fresh copy.
type replayBody struct {
	req *http.Request
}

func (b *replayBody) Read(p []byte) (int, error) { return b.req.Body.Read(p) }

// NewReader returns a reader of the whole body.
func (b *replayBody) NewReader() io.Reader {
	rc, err := b.req.GetBody()
	if err != nil {
		return errReader{err}
	}
	return rc
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// ctxError is a pipeline error of a call whose context ended: errors.As
// finds the *pipeline.Error, errors.Is the context's error.
type ctxError struct {
	err error
	ctx error
}

func (e *ctxError) Error() string   { return e.err.Error() + " (" + e.ctx.Error() + ")" }
func (e *ctxError) Unwrap() []error { return []error{e.err, e.ctx} }

// Degraded reports whether resp was answered by a fallback step in place
// of the service, and why: the value of its X-Switchboard-Degraded
// header, "STEP: REASON" (for example "static: breaker_open").
func Degraded(resp *http.Response) (reason string, ok bool) {
	if resp == nil {
		return "", false
	}
	v := resp.Header.Values(fallback.HeaderDegraded)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}
