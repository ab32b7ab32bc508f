package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// maxSkips bounds the picks a connection spends on endpoints that are at
// MaxConnsPerEndpoint, on top of its connect attempts.
const maxSkips = 64

// conn is one client connection from admission to its end.
type conn struct {
	l      *Listener
	s      *settings
	client *net.TCPConn

	mu       sync.Mutex // guards upstream and closed
	upstream *net.TCPConn
	closed   bool
	cause    atomic.Pointer[string] // why it was closed, first writer wins

	es    *epState     // the endpoint, once picked for good
	ended atomic.Int32 // directions whose copy has returned
	upWG  sync.WaitGroup
	toUp  int64 // bytes pipeUp moved; read after upWG.Wait

	// Activity watch (idle timeout and byte counters of long
	// connections); see watch.
	wmu                sync.Mutex
	timer              *time.Timer
	wstopped           bool
	lastActive         time.Time
	seenDown, seenUp   uint64 // bytes received per the last check
	countDown, countUp uint64 // bytes already added to the metrics
	raw                [2]rawConn
	// copied counts bytes per direction where the platform's copy loop
	// can (not on Linux, where splice moves them in the kernel).
	copied [2]atomic.Uint64
}

// run serves the connection: PROXY header, ClientHello, pick and connect,
// then forward until both sides are done.
func (c *conn) run() {
	cfg := &c.s.cfg
	if cfg.IdleTimeout <= 0 {
		// Without an idle timeout, keep-alive is what finds a dead
		// client (a listener from Listen leaves it off).
		c.client.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true})
	}
	if rc, err := c.client.SyscallConn(); err == nil {
		inlineUrgent(rc) // see inlineUrgent; the endpoint's side: dialControl
	}
	p, ok := c.readPrelude()
	if !ok {
		return
	}
	src, dst, buf, headerLen := p.src, p.dst, p.buf, p.headerLen
	up := c.l.upstreams(p.upstream)
	if up == nil {
		c.reject(RejectNoUpstream, fmt.Errorf("upstream %q does not exist", p.upstream))
		return
	}
	res, latency, ok := c.connect(up, src)
	if !ok {
		return
	}
	// From here the pick is held until the connection ends, so that the
	// endpoint's in-flight count is its open connections (least_conn).
	defer res.Done(endpoint.Outcome{Latency: latency})
	defer c.l.eps.release(c.es)
	c.es.total.Add(1)
	c.es.m.total.Inc()
	c.es.m.active.Inc()
	defer c.es.m.active.Dec()

	up2 := c.upstream
	c.startWatch()
	if cfg.SendProxyProtocol != "" || len(buf) > 0 {
		bufs := net.Buffers{buf}
		if cfg.SendProxyProtocol != "" {
			bufs = net.Buffers{appendProxyHeader(make([]byte, 0, 64), cfg.SendProxyProtocol, src, dst), buf}
		}
		up2.SetWriteDeadline(time.Now().Add(cfg.ConnectTimeout))
		_, err := bufs.WriteTo(up2)
		up2.SetWriteDeadline(time.Time{})
		if err != nil {
			c.abort(CloseError)
		}
	}
	prefix := uint64(headerLen + len(buf))
	c.upWG.Add(1)
	go c.pipeUp(up2)
	fromUp := c.pipe(c.client, up2, &c.copied[1])
	c.upWG.Wait()
	c.finish(prefix+uint64(c.toUp), uint64(fromUp))
}

// pipeUp is the client-to-endpoint direction, on a goroutine of its own.
// Its state lives in conn rather than in a closure: two allocations less
// per connection.
func (c *conn) pipeUp(up *net.TCPConn) {
	defer c.upWG.Done()
	c.toUp = c.pipe(up, c.client, &c.copied[0])
}

// prelude is what a connection says before its bytes are forwarded.
type prelude struct {
	src, dst  netip.AddrPort // the client and the address it reached
	buf       []byte         // bytes read from the client and not yet forwarded
	headerLen int            // the length of the PROXY header read, if any
	upstream  string         // the upstream to forward to
}

// readPrelude reads a PROXY header from a trusted source and, on an SNI
// listener, the ClientHello's server name, and picks the upstream. It
// rejects the connection and reports false when either is bad.
func (c *conn) readPrelude() (p prelude, ok bool) {
	s, cfg := c.s, &c.s.cfg
	p.src, p.dst = addrPort(c.client.RemoteAddr()), addrPort(c.client.LocalAddr())
	if cfg.AcceptProxyProtocol && trusted(cfg.TrustedProxies, p.src.Addr()) {
		var h proxyHeader
		var err error
		p.buf, err = readPrefix(c.client, make([]byte, 0, 512), proxyV2MaxLen, cfg.ProxyProtocolTimeout, func(b []byte) error {
			var perr error
			h, p.headerLen, perr = parseProxyHeader(b)
			return perr
		})
		if err != nil {
			c.reject(RejectProxyProtocol, err)
			return p, false
		}
		if !h.local {
			p.src, p.dst = h.src, h.dst
		}
		p.buf = p.buf[p.headerLen:]
	}
	p.upstream = cfg.Upstream
	if s.sni {
		var name string
		var err error
		b := make([]byte, 0, max(2048, len(p.buf)))
		p.buf, err = readPrefix(c.client, append(b, p.buf...), maxHelloBytes, cfg.SNITimeout, func(b []byte) error {
			var perr error
			name, perr = parseClientHello(b)
			return perr
		})
		if err != nil {
			c.reject(RejectSNI, err)
			return p, false
		}
		if p.upstream = s.route(name); p.upstream == "" {
			c.reject(RejectSNI, fmt.Errorf("no sni route for server name %q and no default upstream", name))
			return p, false
		}
	}
	return p, true
}

// connect picks endpoints and dials them until one answers, up to
// ConnectAttempts, skipping endpoints at MaxConnsPerEndpoint. On success
// c.upstream and c.es are set and the pick is returned to be Done when the
// connection ends; otherwise the client has been turned away.
func (c *conn) connect(up Upstream, src netip.AddrPort) (balance.Result, time.Duration, bool) {
	cfg := &c.s.cfg
	d := net.Dialer{Timeout: cfg.ConnectTimeout, Control: dialControl}
	if cfg.IdleTimeout > 0 {
		// The idle timeout finds dead endpoints; TCP keep-alive would cost
		// four setsockopt calls per connection for nothing more. (nginx's
		// proxy_socket_keepalive and HAProxy's srvtcpka are off by default
		// too.) Without an idle timeout it is the only guard left.
		d.KeepAlive = -1
	}
	a := attempts{info: balance.Info{Key: src.Addr().Unmap().String(), HasKey: true}}
	for {
		res, es, reason, err := a.next(c.l, up, cfg)
		if reason != "" {
			c.reject(reason, err)
			return balance.Result{}, 0, false
		}
		t0 := time.Now()
		// Not Dialer.DialTCP with a zero local address, which would skip
		// the resolver: it binds that "::" explicitly before connecting
		// (golang/go#81620); tried here, it made connections fail and
		// system time soar under bench/run-tcp.sh's connection-rate load.
		nc, err := d.DialContext(c.l.cutCtx, "tcp", res.Endpoint.Address())
		latency := time.Since(t0)
		if err == nil {
			if !c.adopt(nc.(*net.TCPConn), es, res, latency) {
				return balance.Result{}, 0, false
			}
			return res, latency, true
		}
		if reason, err := a.failed(c.l, up, cfg, res, es, err, latency, c.l.cutCtx.Err() != nil); reason != "" {
			c.reject(reason, err)
			return balance.Result{}, 0, false
		}
	}
}

// attempts is a connection's way through its upstream's endpoints, on
// either engine: its picks, the endpoints it skipped for being at
// MaxConnsPerEndpoint, its failed connects.
type attempts struct {
	info     balance.Info
	n, skips int
	lastErr  error
}

// next picks the endpoint to connect to next and takes a slot under
// MaxConnsPerEndpoint on it, skipping endpoints that have none. When no
// endpoint can be tried it returns the reason and the error to turn the
// client away with; reason is "" otherwise.
func (a *attempts) next(l *Listener, up Upstream, cfg *Config) (res balance.Result, es *epState, reason string, err error) {
	for {
		res, err = up.Pick(&a.info)
		if err != nil {
			reason = RejectNoEndpoint
			if a.lastErr != nil {
				reason, err = RejectConnect, fmt.Errorf("%w (after: %w)", err, a.lastErr)
			}
			return balance.Result{}, nil, reason, fmt.Errorf("upstream %q: %w", up.Name(), err)
		}
		ep := res.Endpoint
		if es = l.eps.acquire(up.Name(), ep, cfg.MaxConnsPerEndpoint); es != nil {
			return res, es, "", nil
		}
		res.Done(endpoint.Outcome{Canceled: true}) // says nothing about ep
		if balance.Tried(a.info.Tried, ep) || a.skips >= maxSkips {
			if a.lastErr != nil {
				return balance.Result{}, nil, RejectConnect, fmt.Errorf("upstream %q: %w", up.Name(), a.lastErr)
			}
			return balance.Result{}, nil, RejectEndpointLimit, fmt.Errorf("upstream %q: every endpoint is at max_conns_per_endpoint %d", up.Name(), cfg.MaxConnsPerEndpoint)
		}
		a.skips++
		a.info.Tried = append(a.info.Tried, ep)
	}
}

// failed reports a failed connect to res's endpoint (Done with its error,
// or canceled: cut at the shutdown deadline, which says nothing about the
// endpoint) and lets its slot go. It returns the reason and the error to
// turn the client away with, or "" when the next endpoint is to be tried.
func (a *attempts) failed(l *Listener, up Upstream, cfg *Config, res balance.Result, es *epState, err error, latency time.Duration, canceled bool) (string, error) {
	if !canceled {
		es.m.connectErrs.Inc() // before release: es may be pruned after
	}
	l.eps.release(es)
	res.Done(endpoint.Outcome{Err: err, Latency: latency, Canceled: canceled})
	if canceled {
		return RejectShutdown, err
	}
	a.lastErr = err
	a.n++
	if a.n >= cfg.ConnectAttempts {
		return RejectConnect, fmt.Errorf("upstream %q: %d attempt(s) failed, last: %w", up.Name(), a.n, err)
	}
	a.info.Tried = append(a.info.Tried, res.Endpoint)
	return "", nil
}

// adopt makes uc, just dialed to es's endpoint, the connection's upstream
// side. It reports false (and lets go of uc and the pick) when the
// connection was cut at the shutdown deadline while it dialed.
func (c *conn) adopt(uc *net.TCPConn, es *epState, res balance.Result, latency time.Duration) bool {
	c.mu.Lock()
	cut := c.closed
	if !cut {
		c.upstream = uc
	}
	c.mu.Unlock()
	if cut {
		uc.Close()
		c.l.eps.release(es)
		res.Done(endpoint.Outcome{Latency: latency, Canceled: true})
		return false
	}
	c.es = es
	es.m.connectDelay.Observe(latency.Seconds())
	return true
}

// pipe copies src to dst until src's EOF, then passes the EOF on with
// CloseWrite (half-close). Any error closes the whole connection. The
// direction that ends second skips CloseWrite: finish closes both sockets
// at once, which sends the FIN anyway (one syscall less per connection, as
// nginx does).
func (c *conn) pipe(dst, src *net.TCPConn, count *atomic.Uint64) int64 {
	n, err := copyConn(dst, src, count)
	if c.ended.Add(1) == 1 && err == nil {
		err = dst.CloseWrite()
	}
	if err != nil {
		c.abort(CloseError)
	}
	return n
}

// finish ends a forwarded connection: stops the watch, settles the byte
// counters and closes both sockets.
func (c *conn) finish(down, up uint64) {
	c.stopWatch()
	if down > c.countDown {
		c.es.m.rxDown.Add(down - c.countDown)
	}
	if up > c.countUp {
		c.es.m.rxUp.Add(up - c.countUp)
	}
	c.cause.CompareAndSwap(nil, &causeDone)
	c.l.lm.closed[*c.cause.Load()].Inc()
	c.closeAll()
}

// causeDone is the cause of a connection that ended normally, as a
// pointer that costs no allocation.
var causeDone = CloseDone

// abort closes both sockets, recording why if nobody did before. A
// connection that failed (CloseError: a reset, a broken pipe) is closed
// with a reset, not a FIN, so that the peer still there does not take a
// stream cut short for a complete one.
func (c *conn) abort(cause string) {
	if c.cause.CompareAndSwap(nil, &cause) && cause == CloseError {
		c.mu.Lock()
		if !c.closed {
			c.client.SetLinger(0)
			if c.upstream != nil {
				c.upstream.SetLinger(0)
			}
		}
		c.mu.Unlock()
	}
	c.closeAll()
}

func (c *conn) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.client.Close()
	if c.upstream != nil {
		c.upstream.Close()
	}
}

// reject turns the client away before forwarding.
func (c *conn) reject(reason string, err error) {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.l.reject(c.client, reason, err)
}

// startWatch starts the periodic activity check. Short connections end
// before it ever runs; the timer costs them nothing else.
func (c *conn) startWatch() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.lastActive = time.Now()
	c.timer = time.AfterFunc(c.s.checkEvery, c.check)
}

func (c *conn) stopWatch() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wstopped = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// check looks at the bytes received on both sockets since the last check:
// any means activity; none for IdleTimeout closes the connection. Reading
// the kernel's counters (TCP_INFO) rather than counting in the copy loop
// keeps bytes moving by splice(2), untouched by us.
func (c *conn) check() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wstopped {
		return
	}
	now := time.Now()
	down, up, ok := c.received()
	if ok && (down != c.seenDown || up != c.seenUp) {
		c.lastActive = now
		if down > c.countDown {
			c.es.m.rxDown.Add(down - c.countDown)
			c.countDown = down
		}
		if up > c.countUp {
			c.es.m.rxUp.Add(up - c.countUp)
			c.countUp = up
		}
		c.seenDown, c.seenUp = down, up
	}
	if idle := c.s.cfg.IdleTimeout; idle > 0 && now.Sub(c.lastActive) >= idle {
		if c.l.log.Enabled(context.Background(), slog.LevelDebug) {
			c.l.log.Debug("tcp connection idle: closing", "listener", c.l.name, "client", c.client.RemoteAddr().String(), "idle", now.Sub(c.lastActive))
		}
		c.abort(CloseIdle)
		return
	}
	c.timer.Reset(c.s.checkEvery)
}

// readPrefix reads from c into buf until parse accepts it (nil) or rejects
// it, within timeout and max bytes. It returns every byte read.
func readPrefix(c *net.TCPConn, buf []byte, maxLen int, timeout time.Duration, parse func([]byte) error) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	for {
		err := parse(buf)
		if !errors.Is(err, errNeedMore) {
			return buf, err
		}
		if len(buf) >= maxLen {
			return buf, fmt.Errorf("no complete header in the first %d bytes", maxLen)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(max(cap(buf), 1024), maxLen-len(buf)))...)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), maxLen)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if n > 0 && parse(buf) == nil {
				return buf, nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return buf, fmt.Errorf("timed out after %v with %d bytes", timeout, len(buf))
			}
			return buf, err
		}
	}
}

func trusted(prefixes []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
