package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// The protocols a Transport speaks to endpoints.
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2C   = "h2c"
)

// TransportConfig is how the proxy talks to one upstream's endpoints.
type TransportConfig struct {
	// Protocol is ProtocolHTTP1 (default), ProtocolH2C or ProtocolHTTPS.
	Protocol string
	// TLS, when set, speaks TLS to the endpoints (with ProtocolHTTP1:
	// HTTP/1.1 only; ProtocolHTTPS needs it). Its ServerName, when empty,
	// is each endpoint's host. The transport adds a session cache and the
	// ALPN protocols to a copy. Settings whose TLS is the same pointer
	// are the same (plane keeps it across a reload that changes nothing).
	TLS *tls.Config
	// ConnectTimeout bounds dialing an endpoint.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response header after
	// the request was sent (0: none but the request's own timeout).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes connections idle for longer (0: never).
	IdleTimeout time.Duration
	// MaxIdlePerEndpoint caps the idle connections kept per endpoint (0:
	// none; a connection serves one exchange).
	MaxIdlePerEndpoint int
	// MaxResponseHeaderBytes caps an endpoint's response header (0:
	// h1.DefaultMaxResponseHeaderBytes). Over it the exchange fails, as
	// the endpoint's fault, and its connection is closed. For h2c it is
	// the decoded header list as HTTP/2 counts it (each field's name and
	// value plus 32 bytes), which net/http also announces to the endpoint.
	MaxResponseHeaderBytes int64
}

// Transport sends the proxy's requests to the endpoints of one upstream:
// over the HTTP/1 engine's keep-alive client, or over net/http's
// cleartext HTTP/2 (h2c) transport; with TLS, over the HTTP/1 engine or,
// for endpoints that choose h2 by ALPN, net/http's HTTP/2. It implements
// pipeline.Transport, and closes the idle connections of endpoints that
// leave the upstream's pool.
type Transport struct {
	name  string // the upstream's, for spans
	cfg   TransportConfig
	h1    *h1.Client
	h1up  *h1.Client // https: protocol switches (no h2), ALPN http/1.1 only
	tls   *tlsDialer // nil: cleartext
	h2    *http.Transport
	h2rt  pipeline.HTTPTransport // over h2
	unsub func()
	last  []*endpoint.Endpoint // the pool's members at the last update; under the pool's lock
	// header observes each exchange's time to its response head; nil
	// for none.
	header prometheus.Observer
}

// ObserveResponseHeader makes t observe, in seconds, the time from the
// start of each exchange (taking a pooled connection or dialing one, then
// sending the request) to the endpoint's response head: the upstream's
// time to first byte. Exchanges that fail before a response head are not
// observed. Call it before t is first used.
func (t *Transport) ObserveResponseHeader(o prometheus.Observer) { t.header = o }

// NewTransport returns a transport for the endpoints of pool.
func NewTransport(cfg TransportConfig, pool *endpoint.Pool) *Transport {
	t := &Transport{name: pool.Name(), cfg: cfg}
	maxHead := cfg.MaxResponseHeaderBytes
	if maxHead <= 0 {
		maxHead = h1.DefaultMaxResponseHeaderBytes
	}
	switch {
	case cfg.TLS != nil:
		t.newTLS(maxHead)
	case cfg.Protocol == ProtocolH2C:
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
		t.h2 = &http.Transport{
			Protocols:              &p,
			DialContext:            d.DialContext,
			ResponseHeaderTimeout:  cfg.ResponseHeaderTimeout,
			IdleConnTimeout:        cfg.IdleTimeout,
			MaxIdleConnsPerHost:    cfg.MaxIdlePerEndpoint,
			MaxResponseHeaderBytes: maxHead,
			DisableKeepAlives:      cfg.MaxIdlePerEndpoint == 0, // net/http reads 0 as its default of 2
			DisableCompression:     true,
		}
		t.h2rt = pipeline.HTTPTransport{RoundTripper: t.h2}
	default:
		t.h1 = h1.NewClient(t.h1Config(maxHead, nil))
	}
	if t.h1 != nil {
		t.unsub = pool.Subscribe(t.follow)
	}
	return t
}

// h1Config is the HTTP/1 engine's configuration, dialing with dial (nil:
// TCP).
func (t *Transport) h1Config(maxHead int64, dial func(context.Context, string) (net.Conn, error)) h1.ClientConfig {
	cfg := t.cfg
	return h1.ClientConfig{
		ConnectTimeout: cfg.ConnectTimeout, ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxIdlePerEndpoint: cfg.MaxIdlePerEndpoint,
		MaxResponseHeaderBytes: maxHead, Dial: dial,
	}
}

// Config returns the settings t was built with.
func (t *Transport) Config() TransportConfig { return t.cfg }

// follow closes the idle connections of endpoints that left the pool.
func (t *Transport) follow(s *endpoint.Set) {
	if slices.Equal(s.All, t.last) {
		return // a state change, not a membership change
	}
	now := make(map[*endpoint.Endpoint]bool, len(s.All))
	for _, ep := range s.All {
		now[ep] = true
	}
	var gone []string
	for _, ep := range t.last {
		if !now[ep] {
			gone = append(gone, ep.Address())
		}
	}
	t.last = s.All
	if len(gone) > 0 {
		loopEngines.forget(gone)
		t.h1.Forget(gone)
		if t.h1up != nil {
			t.h1up.Forget(gone)
		}
		if t.tls != nil {
			t.tls.forget(gone)
		}
	}
}

// Close closes the idle connections; those in use close when their
// exchange ends.
func (t *Transport) Close() {
	if t.unsub != nil {
		t.unsub()
	}
	if len(t.last) > 0 {
		// The loops' idle connections to its endpoints, as its own
		// below. (Another upstream with the same endpoint redials.)
		addrs := make([]string, len(t.last))
		for i, ep := range t.last {
			addrs[i] = ep.Address()
		}
		loopEngines.forget(addrs)
	}
	if t.h1 != nil {
		t.h1.Close()
	}
	if t.h1up != nil {
		t.h1up.Close()
	}
	if t.tls != nil {
		t.tls.close()
	}
	if t.h2 != nil {
		t.h2.CloseIdleConnections()
	}
}

// ConnStats returns the open and idle connections per endpoint address
// (HTTP/1.1 only; nil for h2c, and without the HTTP/2 connections of a
// TLS upstream).
func (t *Transport) ConnStats() map[string][2]int64 {
	if t.h1 == nil {
		return nil
	}
	return t.h1.Stats()
}

// RoundTrip implements pipeline.Transport. With the access log or
// tracing on, each attempt is observed (observedTrip).
func (t *Transport) RoundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader) (*http.Response, error) {
	st, _ := c.Front.(*reqState)
	if c.Front == nil {
		// A backup fallback step's exchange: traced when its request is.
		st = tracedState(ctx)
	}
	if st != nil && st.obs.on {
		return t.observedTrip(ctx, deadline, ep, c, body, st)
	}
	return t.send(ctx, deadline, ep, c, body)
}

// send sends one attempt of c to ep, timing it to its response head for
// the upstream's time-to-first-byte series.
func (t *Transport) send(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader) (*http.Response, error) {
	var t0 time.Time
	if t.header != nil {
		t0 = time.Now()
	}
	var resp *http.Response
	var err error
	switch {
	case t.h2 != nil && t.tls != nil:
		resp, err = t.roundTripTLS(ctx, deadline, ep, c, body)
	case t.h1 != nil:
		resp, err = t.roundTripH1(ctx, deadline, t.h1, ep, c, body)
	default:
		resp, err = t.h2rt.RoundTrip(ctx, deadline, ep, c, body)
	}
	if err == nil && t.header != nil {
		t.header.Observe(time.Since(t0).Seconds())
	}
	return resp, err
}

// roundTripH1 sends over the HTTP/1 engine's client hc.
func (t *Transport) roundTripH1(ctx context.Context, deadline time.Time, hc *h1.Client, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader) (*http.Response, error) {
	r := c.Req
	length := r.ContentLength
	if body == nil {
		length = 0
	}
	var store *h1.Body
	if st, ok := c.Front.(*reqState); ok {
		store = st.takeBody()
	}
	resp, err := hc.Do(ctx, deadline, ep.Address(), h1.Request{
		Req: r, URI: h1.RequestURI(r), Host: r.Host, Header: r.Header, Body: body, Length: length, Upgrade: c.Upgrade,
		BodyStore: store,
	})
	if err != nil {
		err = markBodyError(err)
	}
	return resp, err
}

// observedTrip sends one attempt and records it for the access log
// (attempts, time to the response head) and, with tracing on, in a client
// span whose context goes upstream as traceparent: the attempt is sent as
// a call of its own over a copy of the request whose header carries it
// (hedged attempts run at once and must not share one header).
func (t *Transport) observedTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader, st *reqState) (*http.Response, error) {
	o := &st.obs
	backup := c.Front == nil
	var n int32
	if !backup {
		n = o.attempts.Add(1)
	}
	hedge := o.inflight.Add(1) > 1 && !backup
	defer o.inflight.Add(-1)
	var span trace.Span
	if o.tracer != nil {
		var hdr http.Header
		hdr, span = o.tracer.startAttempt(o, c.Req, t.name, ep, n, hedge, backup)
		r := *c.Req
		r.Header = hdr
		c = &pipeline.Call{Req: &r, Upgrade: c.Upgrade, Front: c.Front}
	}
	t0 := time.Now()
	resp, err := t.send(ctx, deadline, ep, c, body)
	if !backup {
		if err == nil {
			o.ttfb.Store(int64(time.Since(t0)))
		}
		o.noteOutcome(resp, err)
	}
	if span != nil {
		endAttempt(span, resp, err)
	}
	return resp, err
}

// markBodyError marks the engine's failure to read the client's body as
// the pipeline's ErrRequestBody. (A function of its own: the error's target
// variable would otherwise be allocated on every exchange.)
func markBodyError(err error) error {
	var be *h1.BodyError
	if errors.As(err, &be) {
		return fmt.Errorf("%w: %w", pipeline.ErrRequestBody, err)
	}
	return err
}
