package pipeline

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// HTTPTransport is a Transport over a net/http RoundTripper: each attempt
// is a copy of the call's request sent to http://ENDPOINT-ADDRESS with the
// same path, query, Host and header. It suits Go programs; the proxy has a
// faster transport of its own.
type HTTPTransport struct {
	// RoundTripper sends the requests; nil means http.DefaultTransport.
	RoundTripper http.RoundTripper
}

// RoundTrip implements Transport.
func (t HTTPTransport) RoundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *Call, body io.Reader) (*http.Response, error) {
	rt := t.RoundTripper
	if rt == nil {
		rt = http.DefaultTransport
	}
	cancel := context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	req := c.Req.Clone(ctx)
	req.URL.Scheme, req.URL.Host = "http", ep.Address()
	req.RequestURI = ""
	req.Body, req.GetBody = nil, nil
	if body != nil {
		req.Body = io.NopCloser(body)
	} else {
		req.ContentLength = 0
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends an attempt's context once its body is done with.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
