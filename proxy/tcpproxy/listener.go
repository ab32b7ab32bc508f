package tcpproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// Upstream is what a listener forwards to: a named pool behind a balancer.
// Pick is called once per connection attempt with Info.Key set to the
// client's IP address (for consistent hashing) and Info.Tried listing the
// endpoints this connection already tried; the Result's Done is called
// exactly once (see the package doc for when).
type Upstream interface {
	Name() string
	Pick(info *balance.Info) (balance.Result, error)
}

// Listen opens the TCP socket for a Listener on addr ("127.0.0.1:7000").
// Unlike net.Listen it leaves TCP keep-alive off on accepted connections,
// saving four setsockopt calls per connection: the idle timeout finds dead
// clients, and a Listener turns keep-alive on for its connections itself
// when its idle timeout is off. It sets on the socket, before it listens,
// the options the event-loop engine wants on every connection (TCP_NODELAY,
// SO_OOBINLINE), which Linux copies into each one it accepts: two
// setsockopt calls less per connection. The socket is plain TCP, never
// MPTCP (Go's default where the kernel has it), which refuses SO_OOBINLINE.
func Listen(ctx context.Context, addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: presetControl}
	// Plain TCP, not Go's default MPTCP where the kernel has it: an MPTCP
	// socket refuses SO_OOBINLINE (EOPNOTSUPP), so urgent data could not
	// be taken inline on it, and the loops' accept path would go through
	// MPTCP's for every plain-TCP client.
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// Listener accepts TCP connections on one socket and forwards each to an
// endpoint of an upstream.
type Listener struct {
	// ln is the socket while the goroutine engine accepts from it (or no
	// engine has started). The loop engine takes the socket (a duplicate
	// of its descriptor, loopEngine.sock) and closes ln, under cmu: the
	// runtime's poller watched ln, and each connection that came woke it
	// (a thread's wake-up and sleep for nothing; bench/run-tcp.sh).
	ln        *net.TCPListener
	addr      net.Addr
	name      string
	upstreams func(name string) Upstream
	lm        *listenerMetrics
	m         *Metrics
	log       *slog.Logger
	set       atomic.Pointer[settings]
	eps       epTable

	// Admission: active counts connections holding a slot under MaxConns
	// (from admission to their end); waiters are the queued ones, oldest
	// first. A released slot goes straight to the oldest waiter.
	amu     sync.Mutex
	active  int
	waiters []*waiter

	accepted, rejected atomic.Uint64

	// Connection tracking for Shutdown.
	cmu     sync.Mutex
	conns   map[*conn]struct{}
	shut    bool // Shutdown began: accept no more
	cutting bool // the shutdown deadline passed: close what is left
	wg      sync.WaitGroup
	shutCh  chan struct{} // closed when Shutdown begins
	// cutCtx is canceled at the shutdown deadline; dials use it.
	cutCtx context.Context
	cut    context.CancelFunc

	serving  atomic.Bool
	finished sync.Once // its metric series let go (finish)

	// lp serves the listener on event loops (Config.Engine); nil: the
	// goroutine engine.
	lp *loopEngine

	// Goroutines that served a connection wait on jobs for the next one
	// (up to maxIdleWorkers of them), keeping the stack a connection grew
	// while it dialed; idle counts them. They leave at Shutdown.
	jobs chan job
	idle atomic.Int32
}

// job is an admitted connection for a worker goroutine.
type job struct {
	c *net.TCPConn
	s *settings
	w *waiter
}

// maxIdleWorkers bounds the goroutines kept waiting for connections.
const maxIdleWorkers = 256

type waiter struct {
	ch      chan struct{} // closed when granted (the goroutine engine's)
	grant   func()        // called under amu when granted (the loop's), in place of ch
	granted bool          // under amu
}

// NewListener returns a listener for ln with cfg. upstreams resolves an
// upstream's name for each new connection (so that reloads that swap
// upstreams reach new connections); it returns nil for an unknown name. A
// nil m gets metrics of the listener's own, registered nowhere; a nil log
// logs to slog.Default(). Serve starts accepting.
//
// The Listener owns ln: Shutdown closes it, and on the event-loop engine
// Serve closes it as soon as the loops hold the socket through a
// descriptor of their own (Accept, File or SetDeadline on ln fail from
// then on; Addr still answers).
func NewListener(ln *net.TCPListener, cfg Config, upstreams func(name string) Upstream, m *Metrics, log *slog.Logger) (*Listener, error) {
	if ln == nil {
		return nil, errors.New("tcpproxy: nil listener")
	}
	if upstreams == nil {
		return nil, errors.New("tcpproxy: nil upstreams func")
	}
	s, err := compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("tcp listener %q: %w", cfg.Name, err)
	}
	if m == nil {
		m = NewMetrics(prometheus.NewRegistry())
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Listener{
		ln:        ln,
		addr:      ln.Addr(),
		name:      cfg.Name,
		upstreams: upstreams,
		m:         m,
		lm:        m.forListener(cfg.Name),
		log:       log,
		conns:     map[*conn]struct{}{},
		shutCh:    make(chan struct{}),
		jobs:      make(chan job),
	}
	l.eps.m, l.eps.metrics, l.eps.listener = map[epKey]*epState{}, m, cfg.Name
	l.cutCtx, l.cut = context.WithCancel(context.Background())
	l.set.Store(s)
	if s.loop {
		l.lp = newLoopEngine(l)
	}
	return l, nil
}

// Addr is the address the listener accepts on.
func (l *Listener) Addr() net.Addr { return l.addr }

// Serve accepts connections until Shutdown, then returns nil. It returns
// an error if the socket fails for another reason (established connections
// go on; Shutdown still drains them). It may be called once.
func (l *Listener) Serve() error {
	if !l.serving.CompareAndSwap(false, true) {
		return fmt.Errorf("tcp listener %q: Serve called twice", l.name)
	}
	// Shutdown waits for the accept loop too: a connection accepted as
	// the socket closes still touches the listener's metric series, which
	// Shutdown lets go of once everything is done.
	l.cmu.Lock()
	if l.shut {
		l.cmu.Unlock()
		return nil
	}
	if l.lp != nil {
		if err := l.lp.start(); err != nil {
			l.cmu.Unlock()
			return fmt.Errorf("tcp listener %q: starting its event loops: %w", l.name, err)
		}
	}
	l.wg.Add(1)
	l.cmu.Unlock()
	defer l.wg.Done()
	l.log.Info("tcp listener serving", "listener", l.name, "addr", l.addr.String(), "engine", l.Engine())
	if l.lp != nil {
		if err := l.lp.wait(); err != nil {
			return fmt.Errorf("tcp listener %q: an event loop stopped: %w", l.name, err)
		}
		return nil
	}
	var backoff time.Duration
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			select {
			case <-l.shutCh:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("tcp listener %q: %w", l.name, err)
			}
			// Out of file descriptors and the like: wait, as net/http
			// does, from 5ms doubling to 1s.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.acceptFailed(err, backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.shutCh:
				t.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		l.accept(c)
	}
}

// accept admits c or turns it away. A connection over the limit with no
// room in the queue is closed here, without a goroutine.
func (l *Listener) accept(c *net.TCPConn) {
	l.accepted.Add(1)
	l.lm.accepted.Inc()
	s := l.set.Load()
	// A connection accepted as Shutdown closes the socket is served and
	// drains with the others (track refuses it once they are being cut):
	// turning it away would lose it for nothing when the socket lives on,
	// a change of engine having handed it to another Listener whose accept
	// it raced. Serve's own count in wg is held, so this Add cannot race
	// Shutdown's Wait.
	l.wg.Add(1)
	ok, w := l.admit(s.cfg.MaxConns, s.cfg.QueueSize, nil)
	if !ok && w == nil {
		l.reject(c, RejectLimit, nil)
		l.wg.Done()
		return
	}
	j := job{c, s, w}
	select {
	case l.jobs <- j: // an idle worker took it
	default:
		// The connection's own count in wg is held, so this Add cannot
		// race Shutdown's Wait.
		l.wg.Add(1)
		go l.worker(j)
	}
}

// worker serves j, then waits for the next connection, as long as fewer
// than maxIdleWorkers others wait and the listener is not shutting down.
// A goroutine that has dialed once has grown its stack for it: reusing it
// saves the next connection the growth (a copy of the stack) and the
// goroutine's creation and exit.
func (l *Listener) worker(j job) {
	defer l.wg.Done()
	for {
		l.serveConn(j.c, j.s, j.w)
		j = job{} // an idle worker keeps nothing of the last connection alive
		if l.idle.Add(1) > maxIdleWorkers {
			l.idle.Add(-1)
			return
		}
		select {
		case j = <-l.jobs:
			l.idle.Add(-1)
		case <-l.shutCh:
			l.idle.Add(-1)
			return
		}
	}
}

func (l *Listener) serveConn(c *net.TCPConn, s *settings, w *waiter) {
	defer l.wg.Done()
	if w != nil {
		if reason := l.wait(w, s.cfg.QueueTimeout); reason != "" {
			l.reject(c, reason, nil)
			return
		}
	}
	defer l.release()
	cn := &conn{l: l, s: s, client: c}
	if !l.track(cn) {
		l.reject(c, RejectShutdown, nil)
		return
	}
	defer l.untrack(cn)
	cn.run()
}

// reject closes a connection that is not forwarded and counts why.
func (l *Listener) reject(c *net.TCPConn, reason string, err error) {
	// Counted before the close, so that whoever sees the close sees the
	// count.
	l.countReject(reason)
	c.Close()
	if err != nil && l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("tcp connection rejected", "listener", l.name, "client", c.RemoteAddr().String(), "reason", reason, "err", err)
	}
}

// countReject counts a connection turned away for reason.
func (l *Listener) countReject(reason string) {
	l.rejected.Add(1)
	l.lm.rejected[reason].Inc()
}

// admit takes a slot under maxConns (ok), or a place in the queue (w), or
// neither (the connection is over the limit). A queued waiter is told of
// its grant by grant (under amu) if it is not nil, else by its channel.
func (l *Listener) admit(maxConns, queueSize int, grant func()) (ok bool, w *waiter) {
	l.amu.Lock()
	defer l.amu.Unlock()
	if maxConns == 0 || l.active < maxConns {
		l.active++
		return true, nil
	}
	if len(l.waiters) < queueSize {
		w = &waiter{grant: grant}
		if grant == nil {
			w.ch = make(chan struct{})
		}
		l.waiters = append(l.waiters, w)
		l.lm.queued.Inc()
		return false, w
	}
	return false, nil
}

// wait waits in the queue for a slot; it returns "" once granted, or the
// reason it gave up.
func (l *Listener) wait(w *waiter, timeout time.Duration) string {
	t := time.NewTimer(timeout)
	defer t.Stop()
	reason := ""
	select {
	case <-w.ch:
		return ""
	case <-t.C:
		reason = RejectQueueTimeout
	case <-l.shutCh:
		reason = RejectShutdown
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	if w.granted { // granted while we timed out: take it
		return ""
	}
	l.unqueueLocked(w)
	return reason
}

// unqueueLocked takes w, not granted, out of the queue.
func (l *Listener) unqueueLocked(w *waiter) {
	if i := slices.Index(l.waiters, w); i >= 0 {
		l.waiters = slices.Delete(l.waiters, i, i+1)
		l.lm.queued.Dec()
	}
}

// release gives a slot back, to the oldest waiter if there is one and the
// limit allows.
func (l *Listener) release() {
	maxConns := l.set.Load().cfg.MaxConns
	l.amu.Lock()
	defer l.amu.Unlock()
	if len(l.waiters) > 0 && (maxConns == 0 || l.active <= maxConns) {
		l.grantLocked()
		return
	}
	l.active--
}

// grantLocked hands the caller's slot to the oldest waiter.
func (l *Listener) grantLocked() {
	w := l.waiters[0]
	l.waiters[0] = nil
	l.waiters = l.waiters[1:]
	w.granted = true
	if w.grant != nil {
		w.grant()
	} else {
		close(w.ch)
	}
	l.lm.queued.Dec()
}

// regrant lets waiters in after the limit was raised.
func (l *Listener) regrant(maxConns int) {
	l.amu.Lock()
	defer l.amu.Unlock()
	for len(l.waiters) > 0 && (maxConns == 0 || l.active < maxConns) {
		l.active++
		l.grantLocked()
	}
}

func (l *Listener) track(c *conn) bool {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if l.cutting {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Listener) untrack(c *conn) {
	l.cmu.Lock()
	delete(l.conns, c)
	l.cmu.Unlock()
}

// Update applies cfg to connections accepted from now on. Established
// connections keep the settings they started with; queued ones are let in
// at once if the new max_conns has room. The listener's name cannot change
// (it labels the metrics): a renamed listener is a new listener. Nor can
// its engine: cfg may name the one running or none (auto keeps it), and a
// listener on the event loop refuses features the loop does not do (Server
// moves such a listener to a new Listener on the same socket).
func (l *Listener) Update(cfg Config) error {
	if cfg.Name != l.name {
		return fmt.Errorf("tcp listener %q: name: cannot change to %q on a running listener", l.name, cfg.Name)
	}
	s, err := compile(cfg)
	if err != nil {
		return fmt.Errorf("tcp listener %q: %w", l.name, err)
	}
	// The engine stays: auto means the one running, if it can serve cfg.
	switch {
	case (cfg.Engine == EngineEventLoop || cfg.Engine == EngineGoroutine) && cfg.Engine != l.Engine():
		return fmt.Errorf("tcp listener %q: engine: cannot change from %s to %s on a running listener", l.name, l.Engine(), cfg.Engine)
	case l.lp != nil && cfg.LoopFeatureMissing() != "":
		return fmt.Errorf("tcp listener %q: engine: it runs on the event loop, which does not do %s (a new listener on the goroutine engine would)", l.name, cfg.LoopFeatureMissing())
	}
	s.loop = l.lp != nil
	l.set.Store(s)
	l.regrant(s.cfg.MaxConns)
	l.log.Info("tcp listener updated", "listener", l.name)
	return nil
}

// Shutdown stops accepting, lets established connections finish until
// ctx is done, then closes the rest (connections still waiting in the
// queue are closed at once). It returns once every connection is closed:
// nil if they all finished, or an error wrapping ctx.Err() saying how many
// were cut. It may be called more than once.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.cmu.Lock()
	first := !l.shut
	l.shut = true
	ln := l.ln
	l.cmu.Unlock()
	if first {
		close(l.shutCh)
		if ln != nil {
			ln.Close()
		}
		if l.lp != nil {
			l.lp.stopAccepting()
		}
		l.log.Info("tcp listener draining", "listener", l.name, "active", l.activeConns())
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		l.stopLoops()
		l.finish()
		return nil
	case <-ctx.Done():
	}
	l.cmu.Lock()
	l.cutting = true
	l.cut()
	left := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		left = append(left, c)
	}
	l.cmu.Unlock()
	for _, c := range left {
		c.abort(CloseShutdown)
	}
	nleft := len(left)
	if l.lp != nil {
		nleft += l.lp.cutAll()
	}
	// Every connection goroutine returns promptly once its sockets are
	// closed and its dial is canceled.
	<-done
	l.stopLoops()
	l.finish()
	if nleft == 0 {
		return nil
	}
	l.log.Warn("tcp listener: connections cut at the shutdown deadline", "listener", l.name, "cut", nleft)
	return fmt.Errorf("tcp listener %q: %d connection(s) cut at the shutdown deadline: %w", l.name, nleft, ctx.Err())
}

// stopLoops stops the event loops once every connection has ended.
func (l *Listener) stopLoops() {
	if l.lp != nil {
		l.lp.stop()
	}
}

// dupSocket is a new listener on l's socket, through a duplicate of its
// descriptor: it accepts from the same queue, and stays open when l is
// shut down (a change of engine hands the socket on with it).
func (l *Listener) dupSocket() (*net.TCPListener, error) {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if l.ln != nil {
		return dupListener(l.ln)
	}
	if l.lp != nil && !l.shut {
		return l.lp.dupSocket()
	}
	return nil, fmt.Errorf("tcp listener %q is shut down", l.name)
}

// Engine is the engine serving the listener: EngineEventLoop or
// EngineGoroutine.
func (l *Listener) Engine() string {
	if l.lp != nil {
		return EngineEventLoop
	}
	return EngineGoroutine
}

// finish lets go of the listener's metric series once no connection is
// left to use them (see seriesGrace in metrics.go).
func (l *Listener) finish() {
	l.finished.Do(func() {
		l.eps.close()
		l.m.releaseListener(l.name)
	})
}

func (l *Listener) activeConns() int {
	l.cmu.Lock()
	n := len(l.conns)
	l.cmu.Unlock()
	if l.lp != nil {
		n += l.lp.activeConns()
	}
	return n
}

// Stats is a listener's state for the admin API (GET /api/v1/tcp serves
// it as JSON).
type Stats struct {
	Listener string `json:"listener"`
	// Active is the connections being served (set up or forwarded);
	// Queued those waiting for a slot under MaxConns.
	Active int `json:"active"`
	Queued int `json:"queued"`
	// Accepted and Rejected count connections since the listener started.
	Accepted uint64 `json:"accepted"`
	Rejected uint64 `json:"rejected"`
	// Endpoints lists the endpoints this listener has used recently.
	Endpoints []EndpointStats `json:"endpoints"`
}

// EndpointStats is one endpoint's share of a listener's connections.
type EndpointStats struct {
	Upstream string `json:"upstream"`
	Address  string `json:"address"`
	// Active counts connections to the endpoint, those still connecting
	// included (what MaxConnsPerEndpoint limits); Total the connections
	// forwarded to it.
	Active int    `json:"active"`
	Total  uint64 `json:"total"`
}

// Stats returns the listener's current numbers.
func (l *Listener) Stats() Stats {
	st := Stats{Listener: l.name, Active: l.activeConns(), Accepted: l.accepted.Load(), Rejected: l.rejected.Load()}
	l.amu.Lock()
	st.Queued = len(l.waiters)
	l.amu.Unlock()
	st.Endpoints = l.eps.stats()
	return st
}

// epTable counts a listener's connections per endpoint, for
// MaxConnsPerEndpoint and Stats, and keeps each endpoint's metric series.
type epTable struct {
	mu       sync.Mutex
	m        map[epKey]*epState
	pruneAt  int
	metrics  *Metrics
	listener string
}

type epKey struct {
	upstream string
	ep       *endpoint.Endpoint
}

type epState struct {
	upstream, addr string
	active         int  // under epTable.mu
	used           bool // since the last prune; under epTable.mu
	total          atomic.Uint64
	m              endpointMetrics
}

// Endpoint entries are pruned when the table has grown past pruneAt: those
// idle since the previous prune go (endpoints that left their pools).
const minPruneAt = 64

// acquire counts a connection to ep, or returns nil if ep is at limit.
func (t *epTable) acquire(upstream string, ep *endpoint.Endpoint, limit int) *epState {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := epKey{upstream, ep}
	st := t.m[k]
	if st == nil {
		if len(t.m) >= max(t.pruneAt, minPruneAt) {
			t.pruneLocked()
		}
		st = &epState{upstream: upstream, addr: ep.Address(), m: t.metrics.forEndpoint(t.listener, upstream, ep.Address())}
		t.m[k] = st
	}
	st.used = true
	if limit > 0 && st.active >= limit {
		return nil
	}
	st.active++
	return st
}

func (t *epTable) release(st *epState) {
	t.mu.Lock()
	st.active--
	t.mu.Unlock()
}

func (t *epTable) pruneLocked() {
	for k, st := range t.m {
		if st.active == 0 && !st.used {
			delete(t.m, k)
			t.metrics.releaseEndpoint(t.listener, st.upstream, st.addr)
		}
		st.used = false
	}
	t.pruneAt = 2 * len(t.m)
}

// close lets go of every endpoint's series once the listener has finished
// (no connection left to use them); finish calls it once.
func (t *epTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, st := range t.m {
		delete(t.m, k)
		t.metrics.releaseEndpoint(t.listener, st.upstream, st.addr)
	}
}

func (t *epTable) stats() []EndpointStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]EndpointStats, 0, len(t.m))
	for _, st := range t.m {
		out = append(out, EndpointStats{Upstream: st.upstream, Address: st.addr, Active: st.active, Total: st.total.Load()})
	}
	slices.SortFunc(out, func(a, b EndpointStats) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Address, b.Address))
	})
	return out
}

// acceptFailed logs an accept that failed for want of a resource and how
// long the engine waits before it accepts again (either engine's).
func (l *Listener) acceptFailed(err error, retry time.Duration) {
	l.log.Warn("tcp listener: accept failed; retrying", "listener", l.name, "err", err, "retry_in", retry)
}
