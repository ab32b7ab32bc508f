package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// transport sends one attempt to one endpoint over a net/http
// RoundTripper: a shallow copy of the caller's request, its URL pointed
// at the endpoint.
type transport struct {
	rt  http.RoundTripper
	tls bool // https://ENDPOINT
}

// firstAttempt is the per-call state of a call (the pipeline's Call.Front)
// that holds the first attempt's request, so that a call answered on its
// first try allocates no request of its own. takeFirst returns it to the
// first caller only, nil after.
type firstAttempt interface {
	takeFirst() *attemptReq
}

// attemptReq is what one attempt allocates: the request and its URL.
type attemptReq struct {
	req http.Request
	url url.URL
}

func (t *transport) RoundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader) (*http.Response, error) {
	cancel := context.CancelFunc(nil)
	if !deadline.IsZero() {
		if d, ok := ctx.Deadline(); !ok || deadline.Before(d) {
			ctx, cancel = context.WithDeadline(ctx, deadline)
		}
	}
	r := c.Req
	var a *attemptReq
	if f, ok := c.Front.(firstAttempt); ok {
		a = f.takeFirst()
	}
	if a == nil {
		a = new(attemptReq)
	}
	a.req, a.url = *r, *r.URL
	a.url.Scheme, a.url.Host, a.url.User = "http", ep.Address(), nil
	if t.tls {
		a.url.Scheme = "https"
	}
	out := &a.req
	out.URL = &a.url
	if ctx != r.Context() {
		out = out.WithContext(ctx)
	}
	out.Close = false
	out.RequestURI = ""
	out.GetBody = nil
	if body == nil {
		out.Body, out.ContentLength = nil, 0
	} else {
		out.Body = pipeline.RequestBody(body)
	}
	return pipeline.SendHTTP(t.rt, out, cancel)
}
