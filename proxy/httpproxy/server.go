package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/retry"
)

// Server runs the HTTP listeners and upstreams of a configuration and moves
// them to a new configuration without dropping requests or connections.
type Server struct {
	log     *slog.Logger
	metrics *Metrics

	mu              sync.Mutex // serialises Apply and Shutdown
	upstreams       map[string]*Upstream
	listeners       map[string]*listener
	shutdownTimeout time.Duration
	draining        sync.WaitGroup // listeners removed by a reload, still finishing
	closed          bool
	limits          *limitSet
	limitMetrics    *limitMetrics

	ups    atomic.Pointer[[]*Upstream]          // sorted by name, for the admin API
	byName atomic.Pointer[map[string]*Upstream] // for tcp listeners' picks
	tcp    map[string]*tcpListener

	disc Discovery // registries for upstreams with discovery; nil for none

	routeStates map[string]*routeState // by route name, kept across rebuilds

	// Auto routes: the source, the services last read from it, the
	// configuration without them, and the watch.
	routeSrc RouteSource
	services map[string][]string
	base     *config.Config
	watch    *bgLoop

	// The metrics sweep (sweep.go), running from the first Apply to
	// Shutdown, and the owners of routing tables replaced since its last
	// run (recent) or still serving requests (retiring).
	sweep    *bgLoop
	recent   *liveSet
	retiring []*table
}

// bgLoop is a goroutine of the server's that runs until its context ends.
type bgLoop struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when it has returned
}

func startLoop(run func(context.Context)) *bgLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &bgLoop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		run(ctx)
	}()
	return l
}

// stopLocked ends l and waits for it with s.mu released (l may take
// s.mu: the sweep and an auto-route apply do); s.mu is held.
func (s *Server) stopLocked(l *bgLoop) {
	l.cancel()
	s.mu.Unlock()
	<-l.done
	s.mu.Lock()
}

// SetDiscovery gives upstreams with discovery their registries. Call it
// before the Apply that first needs it.
func (s *Server) SetDiscovery(d Discovery) {
	s.mu.Lock()
	s.disc = d
	s.mu.Unlock()
}

// NewServer returns a server with nothing running.
func NewServer(log *slog.Logger, m *Metrics) *Server {
	s := &Server{log: log, metrics: m, upstreams: map[string]*Upstream{}, listeners: map[string]*listener{},
		limits: &limitSet{}, limitMetrics: m.limits}
	s.ups.Store(&[]*Upstream{})
	s.byName.Store(&map[string]*Upstream{})
	s.tcp = map[string]*tcpListener{}
	return s
}

// Upstreams returns the running upstreams, sorted by name.
func (s *Server) Upstreams() []*Upstream { return *s.ups.Load() }

// Addr returns the bound address of the named listener ("" if none), which
// tells tests the port of a listener configured on port 0.
func (s *Server) Addr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.listeners[name]; l != nil {
		return l.loop.ln.Addr().String()
	}
	if t := s.tcp[name]; t != nil {
		return t.l.Addr().String()
	}
	return ""
}

// Apply moves the server to cfg, which must have passed validation. Either
// all of cfg takes effect or, on error, none of it does: upstreams, TLS
// certificates and new sockets are all prepared before anything running is
// touched.
func (s *Server) Apply(cfg *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("server is shut down")
	}
	auto := wantsAutoRoutes(cfg)
	if auto && s.routeSrc == nil {
		return errors.New("auto_routes needs the embedded registry, which is not running")
	}
	if err := s.applyLocked(withAutoRoutes(cfg, s.services)); err != nil {
		return err
	}
	s.base = cfg
	if s.sweep == nil {
		s.sweep = startLoop(s.sweepLoop)
	}
	switch {
	case auto && s.watch == nil:
		src := s.routeSrc
		s.watch = startLoop(func(ctx context.Context) { s.watchRoutes(ctx, src) })
	case !auto && s.watch != nil:
		// The watch ends by itself: it checks its context under s.mu
		// before applying anything.
		s.watch.cancel()
		s.watch, s.services = nil, nil
	}
	return nil
}

// applyLocked is Apply's work; s.mu is held.
func (s *Server) applyLocked(cfg *config.Config) error {

	// Prepare.
	ups := make(map[string]*Upstream, len(cfg.Upstreams))
	discard := func() { // what the prepare phase opened, on failure
		for name, u := range ups {
			u.closeNewFeed(s.upstreams[name])
		}
	}
	for name, uc := range cfg.Upstreams {
		u, err := buildUpstream(name, uc, s.upstreams[name], s.log, s.metrics, s.disc)
		if err != nil {
			discard()
			return fmt.Errorf("upstream %q: %w", name, err)
		}
		ups[name] = u
	}
	type plan struct {
		lc   *config.Listener
		l    *listener // existing listener kept, or nil
		loop *acceptLoop
		cert *tls.Certificate
	}
	var plans []plan
	var bound []*acceptLoop
	undo := func() {
		for _, lp := range bound {
			lp.stop()
		}
		discard()
	}
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		if lc.Protocol != "" && lc.Protocol != "http" {
			continue // other protocols are served elsewhere
		}
		p := plan{lc: lc}
		if lc.TLS != nil {
			c, err := tls.LoadX509KeyPair(lc.TLS.CertFile, lc.TLS.KeyFile)
			if err != nil {
				undo()
				return fmt.Errorf("listener %q: load TLS certificate: %w", lc.Name, err)
			}
			p.cert = &c
		}
		if old := s.listeners[lc.Name]; old != nil && old.addr == lc.Listen {
			p.l = old
		} else {
			ln, err := net.Listen("tcp", lc.Listen)
			if err != nil {
				undo()
				return fmt.Errorf("listener %q: %w", lc.Name, err)
			}
			p.loop = newAcceptLoop(ln, s.log)
			bound = append(bound, p.loop)
		}
		plans = append(plans, p)
	}

	tplans, tundo, err := s.prepareTCP(cfg)
	if err != nil {
		undo()
		return err
	}
	undoHTTP := undo
	undo = func() { undoHTTP(); tundo() }

	// Routes, with their rate limits (a global limit needs a Redis client).
	limits := &limitSet{limiters: map[string]*limiter{}, bulkheads: map[string]*bulkhead{}}
	states := map[string]*routeState{}
	tables := make([]*table, len(plans))
	for i, p := range plans {
		t, err := s.buildTable(p.lc, ups, limits, states)
		if err != nil {
			undo()
			for id, l := range limits.limiters {
				if s.limits.limiters[id] != l {
					l.close()
				}
			}
			return err
		}
		tables[i] = t
	}

	// Commit.
	for name, u := range ups {
		u.activate(s.upstreams[name])
	}
	for name, u := range s.upstreams {
		if _, kept := ups[name]; !kept {
			u.retire()
		}
	}
	s.upstreams = ups
	list := make([]*Upstream, 0, len(ups))
	for _, u := range ups {
		list = append(list, u)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	s.ups.Store(&list)
	s.byName.Store(&ups)
	s.shutdownTimeout = cfg.ShutdownTimeout.Std()
	s.commitTCP(tplans)

	for id, l := range s.limits.limiters {
		if limits.limiters[id] != l {
			l.close()
		}
	}
	s.limits = limits
	s.routeStates = states
	next := make(map[string]*listener, len(plans))
	for i, p := range plans {
		tbl := tables[i]
		settings := serverSettingsOf(p.lc)
		l := p.l
		if l == nil {
			l = &listener{name: p.lc.Name, addr: p.lc.Listen, loop: p.loop, handler: newHandler(p.lc.Name, s.log)}
			go p.loop.run()
		}
		l.cert.Store(p.cert)
		if old := l.handler.tbl.Swap(tbl); old != nil {
			s.retire(old)
		}
		if l.srv == nil || l.settings != settings {
			l.startServer(settings, s.log, s.shutdownTimeout)
		}
		next[l.name] = l
	}
	for name, l := range s.listeners {
		if next[name] != l {
			if t := l.handler.tbl.Load(); t != nil {
				s.retire(t)
			}
			s.log.Info("listener removed, draining", "listener", name, "listen", l.addr)
			l.loop.stop() // refuse new connections now; drain the rest below
			s.draining.Add(1)
			timeout := s.shutdownTimeout
			go func() {
				defer s.draining.Done()
				l.shutdown(timeout, s.log)
			}()
		}
	}
	s.listeners = next
	return nil
}

// Shutdown stops accepting on every listener, lets in-flight requests finish
// up to the configured shutdown timeout, then closes what is left. It
// returns once everything has stopped.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	if s.watch != nil {
		s.stopLocked(s.watch) // it sees closed under s.mu and leaves
		s.watch = nil
	}
	if s.sweep != nil {
		s.stopLocked(s.sweep)
		s.sweep = nil
	}
	ls := s.listeners
	s.listeners = map[string]*listener{}
	tls := s.tcp
	s.tcp = map[string]*tcpListener{}
	timeout := s.shutdownTimeout
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.shutdown(timeout, s.log)
		}()
	}
	for _, t := range tls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.shutdown(timeout)
		}()
	}
	wg.Wait()
	s.draining.Wait()
	s.mu.Lock()
	for _, u := range s.upstreams {
		u.retire()
	}
	s.limits.close()
	s.mu.Unlock()
}

func (s *Server) buildTable(lc *config.Listener, ups map[string]*Upstream, limits *limitSet, states map[string]*routeState) (*table, error) {
	t := &table{
		listener:  lc.Name,
		accessLog: lc.AccessLog,
		maxBody:   int64(lc.MaxBodyBytes),
		idle:      lc.Timeouts.Idle.Std(),
		noRoute:   s.metrics.forRoute(lc.Name, "", ""),
	}
	for _, rc := range lc.Routes {
		rt := &route{
			name:   rc.Name,
			prefix: rc.Match.PathPrefix,
			up:     ups[rc.Upstream],
		}
		if rc.Timeout != nil {
			rt.timeout = rc.Timeout.Std()
		}
		if h := strings.ToLower(rc.Match.Host); strings.HasPrefix(h, "*.") {
			rt.host, rt.wildcard = h[1:], true
		} else {
			rt.host = h
		}
		if len(rc.Match.Methods) > 0 {
			rt.methods = rc.Match.Methods
		}
		names := make([]string, 0, len(rc.Match.Headers))
		for k := range rc.Match.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			rt.headers = append(rt.headers, [2]string{http.CanonicalHeaderKey(k), rc.Match.Headers[k]})
		}
		rt.metrics = s.metrics.forRoute(lc.Name, rc.Name, rc.Upstream)
		var err error
		if rt.limiters, rt.bulkhead, err = s.buildLimits(&rc, s.limits, limits); err != nil {
			return nil, err
		}
		// A route keeps its breaker, fallback chain (with its stale
		// copies), retry budget and latency tracker across rebuilds while
		// their settings stay the same: reloads and auto-route changes
		// must not close an open breaker or refill a spent budget.
		key := routeStateKey(&rc)
		if st := s.routeStates[rc.Name]; st != nil && st.key == key {
			rt.brk, rt.fb, rt.retry, rt.budget, rt.p95 = st.brk, st.fb, st.retry, st.budget, st.p95
		} else {
			if err := s.buildResilience(rt, rc.Breaker, rc.Fallback); err != nil {
				return nil, fmt.Errorf("route %q: %w", rc.Name, err)
			}
			if rc.Retry != nil {
				p := rc.Retry.WithDefaults()
				rt.retry, rt.budget = &p, retry.NewBudget(p)
				if _, p95, on := p.Hedge(); on && p95 {
					rt.p95 = &p95Tracker{}
				}
			}
		}
		states[rc.Name] = &routeState{key: key, brk: rt.brk, fb: rt.fb, retry: rt.retry, budget: rt.budget, p95: rt.p95}
		if rc.Fallback != nil {
			rt.staleMax = rc.Fallback.Cache.MaxResponseBytes
			if rt.staleMax == 0 {
				rt.staleMax = fallback.DefaultMaxResponseBytes
			}
		}
		rt.bulkheadRejected = s.limitMetrics.bulkhead.WithLabelValues(rc.Name, "route")
		rt.upBulkheadRejected = s.limitMetrics.bulkhead.WithLabelValues(rc.Name, "upstream")
		t.routes = append(t.routes, rt)
	}
	return t, nil
}

// serverSettings are the listener settings that need a new http.Server to
// change. Routes and certificates change without one.
type serverSettings struct {
	tls            bool
	readHeader     time.Duration
	idle           time.Duration
	maxHeaderBytes int
}

func serverSettingsOf(lc *config.Listener) serverSettings {
	return serverSettings{
		tls:            lc.TLS != nil,
		readHeader:     lc.Timeouts.ReadHeader.Std(),
		idle:           lc.Timeouts.Idle.Std(),
		maxHeaderBytes: int(lc.MaxHeaderBytes),
	}
}

// listener is one bound socket. Its http.Server can be replaced while the
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

// server is what a listener needs of an HTTP server: net/http.Server (TLS,
// HTTP/2) or h1Server (cleartext HTTP/1.x).
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

func (l *listener) startServer(st serverSettings, log *slog.Logger, drain time.Duration) {
	var srv server
	var serve func(net.Listener) error
	if !st.tls {
		h1 := &h1Server{
			handler:           l.handler,
			readHeaderTimeout: st.readHeader,
			idleTimeout:       st.idle,
			maxHeaderBytes:    st.maxHeaderBytes,
			log:               log,
		}
		srv, serve = h1, h1.Serve
	} else {
		hs := &http.Server{
			Handler:           l.handler,
			ReadHeaderTimeout: st.readHeader,
			IdleTimeout:       st.idle,
			MaxHeaderBytes:    st.maxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		}
		hs.TLSConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return l.cert.Load(), nil
			},
		}
		srv = hs
		serve = func(l net.Listener) error { return hs.ServeTLS(l, "", "") }
	}
	h := l.loop.handoff()
	oldSrv, oldHand := l.srv, l.hand
	l.srv, l.hand, l.settings = srv, h, st
	l.serving.Add(1)
	go func() {
		defer l.serving.Done()
		if err := serve(h); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("listener stopped", "listener", l.name, "error", err)
		}
	}()
	if oldSrv != nil {
		// The new server already takes connections; the old one finishes
		// what it has. Idle keep-alive connections of the old server are
		// closed between requests, which HTTP/1.1 clients retry.
		go func() {
			oldHand.Close()
			shutdownServer(oldSrv, drain)
		}()
	}
}

// shutdown stops accepting (new connections are refused), then drains.
func (l *listener) shutdown(timeout time.Duration, log *slog.Logger) {
	l.loop.stop()
	if l.srv != nil {
		if !shutdownServer(l.srv, timeout) {
			log.Warn("shutdown timeout reached, closed remaining connections", "listener", l.name, "timeout", timeout)
		}
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
	return &handoff{loop: a, closed: make(chan struct{})}
}

// handoff is the net.Listener one http.Server sees: closing it stops that
// server without closing the shared socket.
type handoff struct {
	loop   *acceptLoop
	closed chan struct{}
	once   sync.Once
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.loop.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	case <-h.loop.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.loop.ln.Addr() }
