package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// Server runs the HTTP listeners of a configuration and moves them to a
// new one without dropping requests or connections: it binds the sockets,
// serves each with the HTTP/1 engine (on TLS listeners after the
// handshake, with net/http for HTTP/2), and swaps each listener's routing
// table whole.
type Server struct {
	log     *slog.Logger
	metrics *Metrics

	mu        sync.Mutex // serialises changes and Shutdown
	listeners map[string]*listener
	drain     time.Duration  // shutdown_timeout
	draining  sync.WaitGroup // listeners removed by a change, still finishing
	retired   []retiredTable // tables replaced while serving, or recently
	since     time.Time      // of the last Tables: older idle tables are dropped
	closed    bool
	traffic   *trafficState // splits' metrics, mirror copies in flight
}

// retiredTable is what the sweep still needs of a table a change
// replaced: the labels of its series, its count of requests still running,
// and when it was replaced. Not the table itself, which holds its routes'
// pipelines and series caches and would be kept until the sweep after next.
type retiredTable struct {
	series [][3]string
	active *atomic.Int64
	at     time.Time
}

// NewServer returns a server with no listeners.
func NewServer(log *slog.Logger, m *Metrics) *Server {
	return &Server{log: log, metrics: m, listeners: map[string]*listener{}, traffic: newTrafficState()}
}

// Addr returns the bound address of the named listener ("" if none), which
// tells tests the port of a listener configured on port 0.
func (s *Server) Addr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.listeners[name]; l != nil {
		return l.loop.ln.Addr().String()
	}
	return ""
}

// Series calls fn with the labels (listener, route, upstream) of every
// series that requests may still count on: those of the running tables,
// of the tables replaced at or after since, and of replaced ones still
// serving requests (a long stream on a removed route). Route "" is a
// listener's no-route series.
func (s *Server) Series(since time.Time, fn func(listener, route, upstream string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		l.handler.tbl.Load().Series(fn)
	}
	s.since = since
	s.dropRetired()
	for _, r := range s.retired {
		for _, ls := range r.series {
			fn(ls[0], ls[1], ls[2])
		}
	}
}

// retire records a table that was replaced or whose listener was removed;
// s.mu is held. Those no caller of Series needs any more go, so that the
// list stays short however often auto routes rebuild between sweeps.
func (s *Server) retire(t *Table) {
	s.dropRetired()
	r := retiredTable{active: t.active, at: time.Now()}
	t.Series(func(listener, route, upstream string) {
		r.series = append(r.series, [3]string{listener, route, upstream})
	})
	s.retired = append(s.retired, r)
}

// dropRetired forgets the tables replaced before the last Series call that
// serve no request; s.mu is held.
func (s *Server) dropRetired() {
	s.retired = slices.DeleteFunc(s.retired, func(r retiredTable) bool {
		return r.at.Before(s.since) && r.active.Load() == 0
	})
}

// Change is a prepared set of listeners: Commit applies it, Discard
// drops it. Exactly one of them must be called.
type Change struct {
	s     *Server
	plans []plan
	drain time.Duration
	done  bool
}

// plan is one listener of a change.
type plan struct {
	lc    *config.Listener
	l     *listener // existing listener kept, or nil
	loop  *acceptLoop
	cert  *tls.Certificate
	table *Table
}

// Prepare builds the routing tables of cfg's http listeners (pipes gives
// each route's pipeline by name), loads their certificates and binds the
// new sockets, without changing anything that runs. cfg must have passed
// validation.
func (s *Server) Prepare(cfg *config.Config, pipes func(route string) *pipeline.Route) (*Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("server is shut down")
	}
	c := &Change{s: s, drain: cfg.ShutdownTimeout.Std()}
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		if lc.Protocol != "" && lc.Protocol != "http" {
			continue // other protocols are served elsewhere
		}
		p := plan{lc: lc, table: NewTable(lc, pipes, s.metrics)}
		p.table.addTraffic(cfg, lc, pipes, s.metrics, s.traffic)
		if lc.TLS != nil {
			cert, err := tls.LoadX509KeyPair(lc.TLS.CertFile, lc.TLS.KeyFile)
			if err != nil {
				c.Discard()
				return nil, fmt.Errorf("listener %q: load TLS certificate: %w", lc.Name, err)
			}
			p.cert = &cert
		}
		if old := s.listeners[lc.Name]; old != nil && old.addr == lc.Listen {
			p.l = old
		} else {
			ln, err := net.Listen("tcp", lc.Listen)
			if err != nil {
				c.Discard()
				return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
			}
			p.loop = newAcceptLoop(ln, s.log)
		}
		c.plans = append(c.plans, p)
	}
	return c, nil
}

// Discard closes the sockets the change bound.
func (c *Change) Discard() {
	if c.done {
		panic("httpproxy: Change used twice")
	}
	c.done = true
	for _, p := range c.plans {
		if p.loop != nil {
			p.loop.stop()
		}
	}
}

// Commit starts the new listeners, swaps the tables of the kept ones and
// drains the removed ones (in the background, up to shutdown_timeout).
func (c *Change) Commit() {
	s := c.s
	s.mu.Lock()
	if c.done {
		s.mu.Unlock()
		panic("httpproxy: Change used twice")
	}
	if s.closed { // shut down since Prepare: nothing starts
		s.mu.Unlock()
		c.Discard()
		return
	}
	c.done = true
	defer s.mu.Unlock()
	s.drain = c.drain
	next := make(map[string]*listener, len(c.plans))
	for _, p := range c.plans {
		settings := serverSettingsOf(p.lc)
		l := p.l
		if l == nil {
			l = &listener{name: p.lc.Name, addr: p.lc.Listen, loop: p.loop, handler: &Handler{name: p.lc.Name, log: s.log}}
			go p.loop.run()
		}
		l.cert.Store(p.cert)
		if old := l.handler.tbl.Swap(p.table); old != nil {
			s.retire(old)
		}
		switch {
		case l.srv == nil || l.settings.tls != settings.tls:
			l.startServer(settings, s.log, s.drain)
		case l.settings != settings:
			l.applySettings(settings)
		}
		next[l.name] = l
	}
	for name, l := range s.listeners {
		if next[name] != l {
			s.retire(l.handler.tbl.Load())
			s.log.Info("listener removed, draining", "listener", name, "listen", l.addr)
			l.loop.stop() // refuse new connections now; drain the rest below
			s.draining.Add(1)
			go func() {
				defer s.draining.Done()
				l.shutdown(c.drain, s.log)
			}()
		}
	}
	s.listeners = next
}

// Shutdown stops accepting on every listener, lets in-flight requests
// finish up to shutdown_timeout, then closes what is left. It returns once
// everything has stopped.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = map[string]*listener{}
	timeout := s.drain
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.shutdown(timeout, s.log)
		}()
	}
	wg.Wait()
	s.draining.Wait()
	s.traffic.stop(timeout)
}

// serverSettings are the listener settings its server holds. Routes and
// certificates change without touching the server; the others change in
// place on the HTTP/1 engine (cleartext and TLS alike), give a TLS
// listener's HTTP/2 a new net/http server (tlsServer.setSettings), and
// turning TLS on or off needs a new server.
type serverSettings struct {
	tls            bool
	readHeader     time.Duration
	idle           time.Duration
	readBody       time.Duration
	maxHeaderBytes int
}

func serverSettingsOf(lc *config.Listener) serverSettings {
	return serverSettings{
		tls:            lc.TLS != nil,
		readHeader:     lc.Timeouts.ReadHeader.Std(),
		idle:           lc.Timeouts.Idle.Std(),
		readBody:       lc.Timeouts.ReadBody.Std(),
		maxHeaderBytes: int(lc.MaxHeaderBytes),
	}
}

// listener is one bound socket. Its server can be replaced while the
// socket stays open: the accept loop hands connections to whichever server
// currently serves, so a settings change drops nothing.
type listener struct {
	name, addr string
	loop       *acceptLoop
	handler    *Handler
	cert       atomic.Pointer[tls.Certificate]

	srv      server
	hand     *handoff
	settings serverSettings
	serving  sync.WaitGroup
}

// server is what a listener needs of an HTTP server: h1.Server
// (cleartext) or tlsServer.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

func h1Settings(st serverSettings) h1.Settings {
	return h1.Settings{ReadHeaderTimeout: st.readHeader, IdleTimeout: st.idle, ReadBodyTimeout: st.readBody, MaxHeaderBytes: st.maxHeaderBytes}
}

// startServer starts a server with settings st on the listener's socket.
// A server it replaces (TLS turned on or off: its clients must reconnect
// anyway) stops taking connections and drains for up to drain; its idle
// keep-alive connections are closed.
func (l *listener) startServer(st serverSettings, log *slog.Logger, drain time.Duration) {
	oldSrv, oldHand := l.srv, l.hand
	l.serve(st, log)
	if oldSrv != nil {
		go func() {
			oldHand.Close()
			shutdownServer(oldSrv, drain)
		}()
	}
}

// applySettings moves the listener to new settings without closing a
// connection. The HTTP/1 engine takes them in place: every connection
// reads them before its next request. On a TLS listener, HTTP/2 moves to a
// new net/http server (tlsServer.setSettings).
func (l *listener) applySettings(st serverSettings) {
	switch srv := l.srv.(type) {
	case *h1.Server:
		srv.SetSettings(h1Settings(st))
	case *tlsServer:
		srv.setSettings(st)
	}
	l.settings = st
}

// serve starts a server with settings st on a new handoff of the socket
// and makes it the listener's.
func (l *listener) serve(st serverSettings, log *slog.Logger) {
	var srv server
	var serve func(net.Listener) error
	if !st.tls {
		hs := &h1.Server{Handler: l.handler, Log: log}
		hs.SetSettings(h1Settings(st))
		srv, serve = hs, hs.Serve
	} else {
		ts := newTLSServer(l, st, log)
		srv, serve = ts, ts.Serve
	}
	h := l.loop.handoff()
	l.srv, l.hand, l.settings = srv, h, st
	l.serving.Add(1)
	go func() {
		defer l.serving.Done()
		// Serve ends with ErrServerClosed, or with the handoff's ErrClosed
		// when a replaced server stops taking connections.
		if err := serve(h); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log.Error("listener stopped", "listener", l.name, "error", err)
		}
	}()
}

// shutdown stops accepting (new connections are refused), then drains the
// server.
func (l *listener) shutdown(timeout time.Duration, log *slog.Logger) {
	l.loop.stop()
	if l.srv != nil && !shutdownServer(l.srv, timeout) {
		log.Warn("shutdown timeout reached, closed remaining connections", "listener", l.name, "timeout", timeout)
	}
	l.serving.Wait()
}

// shutdownServer drains srv for up to timeout, then closes what is left. It
// reports whether the drain finished in time.
func shutdownServer(srv server, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
		return false
	}
	return true
}

// acceptLoop accepts on a socket and hands each connection to one of the
// servers reading from it.
type acceptLoop struct {
	ln    net.Listener
	log   *slog.Logger
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newAcceptLoop(ln net.Listener, log *slog.Logger) *acceptLoop {
	return &acceptLoop{ln: ln, log: log, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (a *acceptLoop) run() {
	var backoff time.Duration
	for {
		c, err := a.ln.Accept()
		if err != nil {
			select {
			case <-a.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as net/http
			// does, instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			a.log.Warn("accept failed, retrying", "listen", a.ln.Addr().String(), "error", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-a.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		select {
		case a.conns <- c:
		case <-a.done:
			c.Close()
			return
		}
	}
}

// stop closes the socket: from then on connections are refused.
func (a *acceptLoop) stop() {
	a.once.Do(func() {
		close(a.done)
		a.ln.Close()
	})
}

func (a *acceptLoop) handoff() *handoff {
	return newHandoff(a.conns, a.done, a.ln.Addr())
}

// handoff is the net.Listener one server sees of connections that several
// may take from one channel: closing it stops that server without
// stopping the source.
type handoff struct {
	conns  <-chan net.Conn
	done   <-chan struct{} // closed when the source stops
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newHandoff(conns <-chan net.Conn, done <-chan struct{}, addr net.Addr) *handoff {
	return &handoff{conns: conns, done: done, addr: addr, closed: make(chan struct{})}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }
