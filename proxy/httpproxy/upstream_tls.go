package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// ProtocolHTTPS is TLS to the endpoints, with HTTP/2 or HTTP/1.1 as each
// endpoint chooses by ALPN.
const ProtocolHTTPS = "https"

// ALPN protocol IDs.
const (
	alpnH2    = "h2"
	alpnHTTP1 = "http/1.1"
)

// sessionCacheSize is how many TLS sessions a transport keeps for
// resumption: one per server name (or endpoint address when the
// configuration names no server), so that a reconnect to any of them
// skips the full handshake.
const sessionCacheSize = 1024

// tlsDialer opens the TLS connections of one upstream's transport: a TCP
// dial and a handshake, both under the connect timeout (pipeline.DialTLS:
// a failed handshake is a connect failure, since nothing was sent). The
// server name verified (and sent as SNI unless it is an IP
// address) is the configuration's, or else the endpoint's host.
//
// With ALPN offering h2 (protocol https) it also remembers which
// endpoints chose HTTP/2, so that their requests go to the HTTP/2
// transport without a dial, and hands the connection that found it out to
// that transport (parked until its dial takes it) instead of wasting it.
type tlsDialer struct {
	base    *tls.Config // ServerName "" means the endpoint's host
	timeout time.Duration
	dialer  net.Dialer
	byHost  sync.Map // host -> *tls.Config with ServerName set

	// h2eps holds the addresses of the endpoints that chose h2: an
	// immutable map, replaced under mu (it changes once per endpoint),
	// read without a lock or an allocation per request.
	h2eps  atomic.Pointer[map[string]bool]
	mu     sync.Mutex
	parked map[string]*tls.Conn // by endpoint address
	closed bool
}

func newTLSDialer(cfg *tls.Config, alpn []string, connectTimeout time.Duration) *tlsDialer {
	base := cfg.Clone()
	base.NextProtos = alpn
	base.ClientSessionCache = tls.NewLRUClientSessionCache(sessionCacheSize)
	if base.MinVersion == 0 {
		base.MinVersion = tls.VersionTLS12
	}
	d := &tlsDialer{base: base, timeout: connectTimeout, dialer: net.Dialer{KeepAlive: 30 * time.Second}, parked: map[string]*tls.Conn{}}
	d.h2eps.Store(&map[string]bool{})
	return d
}

// configFor is the tls.Config for a connection to addr.
func (d *tlsDialer) configFor(addr string) *tls.Config {
	if d.base.ServerName != "" {
		return d.base
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if c, ok := d.byHost.Load(host); ok {
		return c.(*tls.Config)
	}
	c := d.base.Clone() // shares the session cache
	c.ServerName = host
	actual, _ := d.byHost.LoadOrStore(host, c)
	return actual.(*tls.Config)
}

// dial opens a TLS connection to addr, bounded by ctx.
func (d *tlsDialer) dial(ctx context.Context, addr string) (*tls.Conn, error) {
	return pipeline.DialTLS(ctx, &d.dialer, d.configFor(addr), addr)
}

// negotiatedH2 is the HTTP/1 client's dial error when the endpoint chose
// HTTP/2: the connection is handed to the HTTP/2 transport.
type negotiatedH2 struct {
	addr string
	conn *tls.Conn
}

func (e *negotiatedH2) Error() string { return e.addr + " chose HTTP/2 by ALPN" }

// dialHTTP1 is the HTTP/1 client's dial (its ctx is bounded by the connect
// timeout). An endpoint that chose h2 is remembered, and its connection
// returned in a *negotiatedH2.
func (d *tlsDialer) dialHTTP1(ctx context.Context, addr string) (net.Conn, error) {
	c, err := d.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if c.ConnectionState().NegotiatedProtocol == alpnH2 {
		return nil, &negotiatedH2{addr: addr, conn: c}
	}
	return c, nil
}

// dialH2 is the HTTP/2 transport's DialTLSContext: the connection parked
// for addr, or a new one. An endpoint that now answers HTTP/1.1 is
// forgotten as an HTTP/2 one (this connection still serves its request).
func (d *tlsDialer) dialH2(ctx context.Context, _, addr string) (net.Conn, error) {
	d.mu.Lock()
	c := d.parked[addr]
	delete(d.parked, addr)
	d.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	c, err := d.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if c.ConnectionState().NegotiatedProtocol != alpnH2 {
		d.mu.Lock()
		d.setH2(addr, false)
		d.mu.Unlock()
	}
	return c, nil
}

// isH2 reports whether the endpoint at addr chose HTTP/2.
func (d *tlsDialer) isH2(addr string) bool { return (*d.h2eps.Load())[addr] }

// setH2 marks or unmarks addr as an HTTP/2 endpoint; d.mu is held.
func (d *tlsDialer) setH2(addr string, h2 bool) {
	old := *d.h2eps.Load()
	if old[addr] == h2 {
		return
	}
	m := make(map[string]bool, len(old)+1)
	for a := range old {
		m[a] = true
	}
	if h2 {
		m[addr] = true
	} else {
		delete(m, addr)
	}
	d.h2eps.Store(&m)
}

// found records that e's endpoint chose HTTP/2 and parks its connection
// for the HTTP/2 transport; when another request found it first, the
// connection is not needed.
func (d *tlsDialer) found(e *negotiatedH2) {
	d.mu.Lock()
	if d.closed || d.isH2(e.addr) || d.parked[e.addr] != nil {
		d.setH2(e.addr, true)
		d.mu.Unlock()
		e.conn.Close()
		return
	}
	d.setH2(e.addr, true)
	d.parked[e.addr] = e.conn
	d.mu.Unlock()
}

// forget drops what is known of endpoints that left the pool.
func (d *tlsDialer) forget(addrs []string) {
	d.mu.Lock()
	var gone []*tls.Conn
	for _, a := range addrs {
		d.setH2(a, false)
		if host, _, err := net.SplitHostPort(a); err == nil {
			d.byHost.Delete(host) // made again if another endpoint has the host
		}
		if c := d.parked[a]; c != nil {
			gone = append(gone, c)
			delete(d.parked, a)
		}
	}
	d.mu.Unlock()
	for _, c := range gone {
		c.Close()
	}
}

// close closes the parked connections.
func (d *tlsDialer) close() {
	d.mu.Lock()
	d.closed = true
	parked := d.parked
	d.parked = map[string]*tls.Conn{}
	d.mu.Unlock()
	for _, c := range parked {
		c.Close()
	}
}

// newTLS builds t's clients for TLS endpoints: the HTTP/1 engine over
// TLS, and for ProtocolHTTPS net/http's HTTP/2 for the endpoints that
// choose h2, with an HTTP/1-only engine for protocol switches (which
// HTTP/2 cannot carry).
func (t *Transport) newTLS(maxHead int64) {
	cfg := t.cfg
	if cfg.Protocol != ProtocolHTTPS {
		d := newTLSDialer(cfg.TLS, []string{alpnHTTP1}, cfg.ConnectTimeout)
		t.h1 = h1.NewClient(t.h1Config(maxHead, func(ctx context.Context, addr string) (net.Conn, error) { return d.dial(ctx, addr) }))
		return
	}
	t.tls = newTLSDialer(cfg.TLS, []string{alpnH2, alpnHTTP1}, cfg.ConnectTimeout)
	t.h1 = h1.NewClient(t.h1Config(maxHead, t.tls.dialHTTP1))
	up := newTLSDialer(cfg.TLS, []string{alpnHTTP1}, cfg.ConnectTimeout)
	up.base.ClientSessionCache = t.tls.base.ClientSessionCache
	t.h1up = h1.NewClient(t.h1Config(maxHead, func(ctx context.Context, addr string) (net.Conn, error) { return up.dial(ctx, addr) }))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	t.h2 = &http.Transport{
		Protocols:              &p,
		ForceAttemptHTTP2:      true,
		DialTLSContext:         t.tls.dialH2,
		ResponseHeaderTimeout:  cfg.ResponseHeaderTimeout,
		IdleConnTimeout:        cfg.IdleTimeout,
		MaxIdleConnsPerHost:    cfg.MaxIdlePerEndpoint,
		MaxResponseHeaderBytes: maxHead,
		DisableKeepAlives:      cfg.MaxIdlePerEndpoint == 0,
		DisableCompression:     true,
	}
	t.h2rt = pipeline.HTTPTransport{RoundTripper: t.h2, TLS: true}
}

// roundTripTLS sends one attempt to a TLS endpoint of a ProtocolHTTPS
// upstream: over HTTP/2 when the endpoint chose it, else over the HTTP/1
// engine, whose dial finds out (and hands a connection that negotiated h2
// over). A protocol switch always goes over HTTP/1.1.
func (t *Transport) roundTripTLS(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *pipeline.Call, body io.Reader) (*http.Response, error) {
	if c.Upgrade != "" {
		return t.roundTripH1(ctx, deadline, t.h1up, ep, c, body)
	}
	if t.tls.isH2(ep.Address()) {
		return t.h2rt.RoundTrip(ctx, deadline, ep, c, body)
	}
	resp, err := t.roundTripH1(ctx, deadline, t.h1, ep, c, body)
	if err != nil {
		if nh := asNegotiatedH2(err); nh != nil {
			t.tls.found(nh)
			return t.h2rt.RoundTrip(ctx, deadline, ep, c, body)
		}
	}
	return resp, err
}

// asNegotiatedH2 finds the *negotiatedH2 in err. (A function of its own:
// the target variable would otherwise be allocated on every exchange.)
func asNegotiatedH2(err error) *negotiatedH2 {
	var nh *negotiatedH2
	if errors.As(err, &nh) {
		return nh
	}
	return nil
}
