package httpproxy

import (
	"context"
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
	"github.com/switchboard-dev/switchboard/proxy/acme"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// Server runs the HTTP listeners of a configuration and moves them to a
// new one without dropping requests or connections: it binds the sockets,
// serves each with the HTTP/1 engine (on TLS listeners after the
// handshake, with net/http for HTTP/2), and swaps each listener's routing
// table whole.
type Server struct {
	log     *slog.Logger
	out     *accessOutput // SetAccessLog's, or nil
	metrics *Metrics
	certs   *CertMetrics
	sources func(lc *config.Listener) ([]CertSource, error)

	mu        sync.Mutex // serialises changes and Shutdown
	listeners map[string]*listener
	drain     time.Duration  // shutdown_timeout
	draining  sync.WaitGroup // listeners removed by a change, still finishing
	retired   []retiredTable // tables replaced while serving, or recently
	since     time.Time      // of the last Tables: older idle tables are dropped
	closed    bool

	acme        map[string]*acmeEntry // the listeners' ACME managers, by name
	acmeMetrics *acme.Metrics
	traffic     *trafficState // splits' metrics, mirror copies in flight
}

// retiredTable is what the sweep still needs of a table a change
// replaced: the labels of its series, its count of requests still running,
// and when it was replaced. Not the table itself, which holds its routes'
// pipelines and series caches and would be kept until the sweep after next.
type retiredTable struct {
	series [][3]string
	active *activity
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
		return l.loop.addr.String()
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
		return r.at.Before(s.since) && r.active.idle()
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
	tls   *listenerTLS // nil on a cleartext listener
	acme  *acmeEntry   // tls.acme's manager, or nil
	table *Table
	// back is the goroutine engine's listener on the socket of kept
	// listener l, made from the event loops' descriptor, when the change
	// moves l off the loops (nil otherwise): made in Prepare, so that a
	// failure (out of descriptors) changes nothing.
	back net.Listener
}

// SetAccessLog has the server write its listeners' access log lines with
// its own encoder, to al.Writer, in the bytes the logger's handler (the
// slog.TextHandler or JSONHandler al describes) would write, rather than
// through the logger. Without it, they go through the logger's handler,
// whatever it is. It returns an error, and changes nothing, when al names
// no format it knows or no writer. Call it before the first Prepare.
func (s *Server) SetAccessLog(al AccessLog) error {
	out, err := newAccessOutput(al)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.out = out
	s.mu.Unlock()
	return nil
}

// SetCertMetrics gives the server the metrics its listeners' certificate
// files count their reloads in. Call it before the first Prepare.
func (s *Server) SetCertMetrics(m *CertMetrics) {
	s.mu.Lock()
	s.certs = m
	s.mu.Unlock()
}

// SetCertSources gives TLS listeners certificate sources beside their
// files (ACME): Prepare calls fn for every TLS listener of a
// configuration, and the sources it returns are asked, in order, before
// the listener's files; the files' first certificate remains the
// fallback. An error fails the Prepare. Call it before the first Prepare.
func (s *Server) SetCertSources(fn func(lc *config.Listener) ([]CertSource, error)) {
	s.mu.Lock()
	s.sources = fn
	s.mu.Unlock()
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
		if lc.TLS != nil && lc.TLS.ACME != nil {
			e, err := s.prepareACME(lc)
			if err != nil {
				c.Discard()
				return nil, err
			}
			p.acme = e
		}
		// failed drops what this listener's plan made so far, with the
		// change: a new ACME manager is not in c.plans yet.
		failed := func() {
			discardACME([]plan{p})
			c.Discard()
		}
		if old := s.listeners[lc.Name]; old != nil && old.addr == lc.Listen {
			p.l = old
		}
		if lc.TLS != nil {
			lt, err := s.prepareTLS(lc, p.l, p.acme)
			if err != nil {
				failed()
				return nil, err
			}
			p.tls = lt
		}
		if p.l != nil && p.l.ev != nil && !wantsEventLoop(p) {
			ln, err := p.l.ev.Listener()
			if err != nil {
				p.tls.discard()
				failed()
				return nil, fmt.Errorf("listener %q: engine: %w", lc.Name, err)
			}
			p.back = ln
		}
		if p.l == nil {
			ln, err := net.Listen("tcp", lc.Listen)
			if err != nil {
				p.tls.discard()
				failed()
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
		if p.back != nil {
			p.back.Close()
		}
		p.tls.discard()
	}
	discardACME(c.plans)
}

// prepareTLS builds the TLS settings of listener lc, which replaces old
// (nil: a new listener). The running listener's certificate files are kept, and read again, when lc names
// the same ones: their watch goes on.
func (s *Server) prepareTLS(lc *config.Listener, old *listener, a *acmeEntry) (*listenerTLS, error) {
	var sources []CertSource
	if s.sources != nil {
		var err error
		if sources, err = s.sources(lc); err != nil {
			return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
	}
	if a != nil {
		// tls.acme is the listener's only certificate source (the
		// configuration refuses files beside it).
		sources = append(sources, a.m)
	}
	var files *CertFiles
	if old != nil {
		if lt := old.tls.Load(); lt != nil && lt.files != nil && lt.files.sameFiles(lc.TLS.Certs()) {
			files = lt.files
			files.Reload()
		}
	}
	if files == nil && len(lc.TLS.Certs()) == 0 && len(sources) == 0 {
		return nil, fmt.Errorf("listener %q: %w", lc.Name, errNoCertSource)
	}
	return newListenerTLS(lc, files, sources, s.log, s.certs)
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
			l = &listener{name: p.lc.Name, addr: p.lc.Listen, loop: p.loop, handler: &Handler{name: p.lc.Name, log: s.log, out: s.out}}
			if wantsEventLoop(p) {
				l.ev = startEventLoop(l, settings, s.log, s.metrics)
			}
			if l.ev == nil {
				p.loop.start()
			}
		} else if wantsEventLoop(p) != (l.ev != nil) {
			s.switchEngine(l, settings, c.drain, p.back)
		}
		if p.back != nil && l.loop.ln != p.back {
			p.back.Close() // not taken (no switch off the loops after all)
		}
		l.tls.Swap(p.tls).replaced(p.tls)
		if p.tls == nil || p.tls.files == nil {
			s.certs.CertificatesLoaded(l.name) // serves no certificate files (any more)
		}
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
			if l.ev != nil {
				stopAccepting(l.ev) // the loops' descriptor of the socket
			}
			s.draining.Add(1)
			go func() {
				defer s.draining.Done()
				l.shutdown(c.drain, s.log)
			}()
		}
	}
	s.commitACME(c.plans, next)
	s.listeners = next
}

// wantsEventLoop reports whether plan p's listener is to run on the
// event-loop engine: named, or by default (auto: config.Listener's
// EventLoop) unless the loops would hand every request over (the
// listener's own features that the loop does not have: tracing,
// redirect_https), where the goroutine engine serves it without a
// hand-off per connection.
func wantsEventLoop(p plan) bool {
	if p.tls != nil || !p.lc.EventLoop() {
		return false
	}
	if p.lc.Engine == config.EngineEventLoop {
		return true
	}
	t := p.table
	return t.tracer == nil && t.front == nil
}

// switchEngine moves kept listener l to the other engine without closing
// its socket; s.mu is held. Nothing is refused: connections that come
// meanwhile wait in the socket's queue for the new engine. To the event
// loops, the goroutine engine's accept loop pauses and the loops take
// the socket (h1loop.New closes the goroutine engine's listener); back,
// the goroutine engine accepts from back, a listener made from the
// loops' descriptor (Prepare), before the loops stop accepting: for a
// moment both take connections. The old engine's connections are served
// to their end: the goroutine engine's stay on the listener's server,
// which both engines share; the event loops drain in the background
// (their idle keep-alive connections close at once, the others after
// the response under way), up to drain, and Shutdown waits for them.
// When the event loops cannot start, the goroutine engine goes on
// accepting (startEventLoop logs why); when there is no listener back
// and none can be made, the loops go on serving.
func (s *Server) switchEngine(l *listener, st serverSettings, drain time.Duration, back net.Listener) {
	if l.ev == nil {
		ev := startEventLoop(l, st, s.log, s.metrics)
		if ev == nil {
			l.loop.start()
			return
		}
		l.ev = ev
		s.log.Info("listener engine changed", "listener", l.name, "from", config.EngineGoroutine, "to", config.EngineEventLoop)
		return
	}
	old := l.ev
	if back == nil {
		var err error
		if back, err = old.Listener(); err != nil {
			s.log.Error("engine change failed, serving on the event loops", "listener", l.name, "error", err)
			return
		}
	}
	l.ev = nil
	l.loop.ln = back
	l.loop.start()
	// Once the change is committed, no new connection reaches the old
	// loops (the drain below starts on its own goroutine).
	stopAccepting(old)
	s.log.Info("listener engine changed", "listener", l.name, "from", config.EngineEventLoop, "to", config.EngineGoroutine)
	s.draining.Add(1)
	l.retired.Add(1)
	go func() {
		defer s.draining.Done()
		defer l.retired.Done()
		if !shutdownEventLoop(old, drain) {
			s.log.Warn("engine change: drain timeout reached, closed remaining event-loop connections", "listener", l.name, "timeout", drain)
		}
	}()
}

// Engine returns the HTTP/1.1 engine the named listener runs on now,
// config.EngineGoroutine or config.EngineEventLoop ("" if there is no
// such listener): the configured one, unless the event loops could not
// start.
func (s *Server) Engine(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch l := s.listeners[name]; {
	case l == nil:
		return ""
	case l.ev != nil:
		return config.EngineEventLoop
	}
	return config.EngineGoroutine
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
	managers := s.acme
	s.acme = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range managers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.m.Close()
		}()
	}
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
// listener's HTTP/2 a new net/http server (connServer.setSettings), and
// turning TLS on or off needs a new server.
type serverSettings struct {
	tls            bool
	h2c            bool // cleartext HTTP/2 with prior knowledge
	readHeader     time.Duration
	idle           time.Duration
	readBody       time.Duration
	maxHeaderBytes int
}

func serverSettingsOf(lc *config.Listener) serverSettings {
	return serverSettings{
		tls:            lc.TLS != nil,
		h2c:            lc.TLS == nil && (lc.H2C == nil || *lc.H2C),
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
	tls        atomic.Pointer[listenerTLS] // nil on a cleartext listener

	srv  server
	hand *handoff
	// ev is the event-loop engine serving the socket (engine:
	// eventloop), which hands the requests it does not serve to srv; nil
	// when srv accepts them all.
	ev       eventLoop
	settings serverSettings
	serving  sync.WaitGroup
	// retired counts the event-loop engines a reload took off the
	// socket that still drain: what they hand over goes to srv too.
	retired sync.WaitGroup
}

// server is what a listener needs of an HTTP server: connServer.
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
// new net/http server (connServer.setSettings).
func (l *listener) applySettings(st serverSettings) {
	if srv, ok := l.srv.(*connServer); ok {
		srv.setSettings(st)
	}
	if l.ev != nil {
		l.ev.SetSettings(l.loop.loopSettings(st))
	}
	l.settings = st
}

// serve starts a server with settings st on a new handoff of the socket
// and makes it the listener's.
func (l *listener) serve(st serverSettings, log *slog.Logger) {
	ts := newConnServer(l, st, log)
	srv, serve := server(ts), ts.Serve
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
	// The event loops' descriptor of the socket closes as their drain
	// begins: from then on connections are refused.
	if l.ev != nil && !shutdownEventLoop(l.ev, timeout) {
		log.Warn("shutdown timeout reached, closed remaining event-loop connections", "listener", l.name, "timeout", timeout)
	}
	// What the loops (and those a reload retired) handed over while they
	// drained has reached the server, whose drain below takes it in.
	l.retired.Wait()
	l.loop.finish()
	l.tls.Load().replaced(nil) // stop watching its certificate files
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

// acceptLoop owns a listener's socket and the channel its connections
// reach the listener's servers through. While the goroutine engine
// serves, its accept goroutine (start) accepts and hands each connection
// over; the event-loop engine's connections that it does not serve
// itself come through the same channel.
type acceptLoop struct {
	// ln is the socket while the goroutine engine accepts from it, or
	// before an engine starts; nil while the event loops hold it
	// (startEventLoop): the loops accept from a descriptor of their own,
	// and h1loop.New closes ln, which the runtime's poller watched (each
	// new connection woke one of its threads for nothing). Set under the
	// server's mu, as start and pause are called.
	ln    net.Listener
	addr  net.Addr // the socket's, whoever holds it
	log   *slog.Logger
	conns chan net.Conn
	done  chan struct{} // closed with the socket (stop)
	once  sync.Once
	// closed is closed once no connection can come through conns any
	// more (finish): the socket is closed, the event loops have drained,
	// and every connection on its way to the servers has reached one.
	// Until then a server draining at shutdown still takes what the
	// loops hand over: a connection whose first request came during the
	// drain and needs the goroutine engine is served, not dropped.
	closed     chan struct{}
	closeOnce  sync.Once
	delivering sync.WaitGroup // the accept goroutine and the loops' handoffs under way
	// cur is the accept goroutine running, nil when none is. start and
	// pause are called with the server's mu held.
	cur *acceptRun
}

// acceptRun is one run of the accept goroutine.
type acceptRun struct {
	ln    net.Listener  // the listener it accepts from
	pause chan struct{} // closed to make it return, the socket left open
	ended chan struct{} // closed once it has returned
}

func newAcceptLoop(ln net.Listener, log *slog.Logger) *acceptLoop {
	return &acceptLoop{ln: ln, addr: ln.Addr(), log: log, conns: make(chan net.Conn), done: make(chan struct{}), closed: make(chan struct{})}
}

// start runs the accept goroutine on a.ln, unless it runs already.
func (a *acceptLoop) start() {
	if a.cur != nil {
		return
	}
	r := &acceptRun{ln: a.ln, pause: make(chan struct{}), ended: make(chan struct{})}
	a.cur = r
	a.delivering.Add(1)
	go func() {
		defer a.delivering.Done()
		defer close(r.ended)
		a.run(r.ln, r.pause)
	}()
}

// pause stops the accept goroutine and returns once it has, without
// closing the socket: connections that arrive meanwhile wait in its
// backlog for whoever accepts next. A connection it accepted is handed
// over first.
func (a *acceptLoop) pause() {
	r := a.cur
	if r == nil {
		return
	}
	a.cur = nil
	close(r.pause)
	// A deadline in the past wakes an Accept blocked on the socket (net's
	// listeners all take one).
	d, ok := r.ln.(interface{ SetDeadline(time.Time) error })
	if ok {
		d.SetDeadline(time.Now())
	}
	<-r.ended
	if ok {
		d.SetDeadline(time.Time{})
	}
}

func (a *acceptLoop) run(ln net.Listener, pause <-chan struct{}) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-a.done:
				return
			case <-pause:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as net/http
			// does, instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			a.acceptFailed(err, backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-a.done:
				t.Stop()
				return
			case <-pause:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		select {
		case a.conns <- c:
		case <-a.closed:
			c.Close()
			return
		}
	}
}

// stop closes the goroutine engine's listener, if it holds the socket
// (the event loops close theirs as they stop accepting): from then on
// connections are refused. The connections accepted before go on to the
// servers until finish.
func (a *acceptLoop) stop() {
	a.once.Do(func() {
		close(a.done)
		if a.ln != nil {
			a.ln.Close()
		}
	})
}

// deliver hands nc, a connection an event loop does not serve itself, to
// the listener's server, without making the loop wait for it.
func (a *acceptLoop) deliver(nc net.Conn) {
	a.delivering.Add(1)
	go func() {
		defer a.delivering.Done()
		select {
		case a.conns <- nc:
		case <-a.closed:
			nc.Close()
		}
	}()
}

// finish ends the stream of connections, once the socket is closed
// (stop) and no event loop runs on it any more: it waits until every
// connection on its way has reached a server, then tells the servers'
// Accept that no more come.
func (a *acceptLoop) finish() {
	a.delivering.Wait()
	a.closeOnce.Do(func() { close(a.closed) })
}

func (a *acceptLoop) handoff() *handoff {
	return newHandoff(a.conns, a.closed, a.addr)
}

// handoff is the net.Listener one server sees of connections that several
// may take from one channel: closing it stops that server without
// stopping the source.
type handoff struct {
	conns  <-chan net.Conn
	done   <-chan struct{} // closed when the source has no more
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
