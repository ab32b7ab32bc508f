package pipeline

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// HTTPTransport is a Transport over a net/http RoundTripper: each attempt
// is a new request to http://ENDPOINT-ADDRESS with the call's method,
// path, query, Host and header (shared, not copied: a RoundTripper does
// not change it). The caller's Close is not passed on: the connection to
// the endpoint is kept for the next call. It suits Go programs; the HTTP
// proxy sends its h2c upstreams' requests through it.
type HTTPTransport struct {
	// RoundTripper sends the requests; nil means http.DefaultTransport.
	RoundTripper http.RoundTripper
	// TLS sends them to https://ENDPOINT: the RoundTripper speaks TLS.
	TLS bool
}

// RoundTrip implements Transport.
func (t HTTPTransport) RoundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *Call, body io.Reader) (*http.Response, error) {
	rt := t.RoundTripper
	if rt == nil {
		rt = http.DefaultTransport
	}
	var cancel context.CancelFunc
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	r := c.Req
	var rb io.Reader
	if body != nil {
		rb = RequestBody(body)
	}
	scheme := "http://"
	if t.TLS {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+ep.Address()+r.URL.RequestURI(), rb)
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	req.Host, req.Header, req.Trailer = r.Host, r.Header, r.Trailer
	req.ContentLength = r.ContentLength
	if body == nil {
		req.ContentLength = 0
	}
	return SendHTTP(rt, req, cancel)
}

// SendHTTP sends req, one attempt's request, through rt, for a Transport
// over net/http: a response with a malformed status is an error, and
// cancel, which may be nil, ends the attempt's context when the response
// body is closed (at once on an error). Wrap the attempt's body with
// RequestBody first.
func SendHTTP(rt http.RoundTripper, req *http.Request, cancel context.CancelFunc) (*http.Response, error) {
	resp, err := rt.RoundTrip(req)
	if err == nil && resp.StatusCode < 100 {
		resp.Body.Close()
		err = fmt.Errorf("read response: malformed status code %d", resp.StatusCode)
	}
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	if cancel != nil {
		resp.Body = &cancelOnClose{resp.Body, cancel}
	}
	return resp, nil
}

// RequestBody is an attempt's body as a Transport over net/http sends it:
// a failure to read the caller's body is marked ErrRequestBody, so that it
// does not count against the endpoint, and closing it leaves the caller's
// body open (a retry reads it again, the front end closes it).
func RequestBody(body io.Reader) io.ReadCloser { return io.NopCloser(bodyReader{body}) }

// bodyReader marks a failure to read the caller's body (ErrRequestBody),
// so that it does not count against the endpoint.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", ErrRequestBody, err)
	}
	return n, err
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
