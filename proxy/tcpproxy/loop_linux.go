//go:build linux

package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/proxy/evloop"
)

// loopAvailable: this system has the event-loop engine.
const loopAvailable = true

// loopEngine serves a listener on event loops (proxy/evloop): each loop
// accepts from the listening socket (EPOLLEXCLUSIVE: a new connection
// wakes one loop), admits, picks, connects without blocking and forwards
// both ways (copying small exchanges, splicing bulk), every connection's
// work on the loop that accepted it.
type loopEngine struct {
	l      *Listener
	sock   *evloop.Socket // the listening socket, the loops' own descriptor of it; set by start, under l.cmu
	preset bool           // socketOpts are set on the listening socket (presetAccepted)
	// lingers: the listening socket has SO_LINGER with a timeout, which
	// accepted sockets inherit and which would make a loop's close wait:
	// each client socket's linger is turned off.
	lingers bool
	loops   []*tloop     // set by start, under l.cmu
	active  atomic.Int64 // connections admitted and not yet ended (Stats.Active)
	errs    chan error   // a loop's Run failed
	stopped sync.Once
}

// tloop is one event loop's share: its connections, its pipes and the
// connection structs it keeps for reuse.
type tloop struct {
	e     *loopEngine
	ev    *evloop.Loop
	pipes evloop.Pipes
	bufs  evloop.Free[[]byte] // empty copy buffers (copyBufSize), for the next reads
	conns *lconn              // every connection of the loop, a doubly linked list
	free  evloop.Free[*lconn] // ended connections, for the next ones
	acc   evloop.Acceptor
	// preset: the connections accepted come with socketOpts set, copied
	// from the listening socket; checked on the loop's first connection
	// (checked), and from then on not set again.
	preset, checked bool
	// The last client address's text (Info.Key): clients come back, and
	// the text costs an allocation.
	lastAddr netip.Addr
	lastKey  string
}

// key is a client address's text, the hash key of its picks.
func (tl *tloop) key(a netip.Addr) string {
	a = a.Unmap()
	if a != tl.lastAddr || tl.lastKey == "" {
		tl.lastAddr, tl.lastKey = a, a.String()
	}
	return tl.lastKey
}

// maxFreeConns bounds the connection structs a loop keeps for reuse.
const maxFreeConns = 1024

func newLoopEngine(l *Listener) *loopEngine {
	return &loopEngine{l: l, errs: make(chan error, 1)}
}

// start makes the loops (GOMAXPROCS-1, at least 1, as proxy/h1loop) and
// runs them; under l.cmu, from Serve.
func (e *loopEngine) start() error {
	sock, err := evloop.TakeSocket(e.l.ln)
	if err != nil {
		return err
	}
	fd := sock.FD()
	e.preset = presetAccepted(fd)
	if lg, err := unix.GetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER); err == nil && lg.Onoff != 0 && lg.Linger > 0 {
		e.lingers = true
	}
	n := evloop.DefaultLoops()
	for range n {
		el, err := evloop.New()
		if err == nil {
			tl := &tloop{e: e, ev: el}
			tl.pipes.Size = pipeSize
			tl.acc.Take = tl.accept
			tl.acc.Failed = e.l.acceptFailed
			tl.acc.Batch = evloop.AcceptBatch(n)
			if err = tl.acc.Watch(el, fd); err == nil {
				e.loops = append(e.loops, tl)
				continue
			}
			el.Close()
		}
		for _, tl := range e.loops {
			tl.ev.Close()
		}
		e.loops = nil
		sock.Close()
		return err
	}
	e.sock = sock
	// The loops have the socket: the runtime's poller lets go of it (see
	// Listener.ln).
	e.l.ln.Close()
	e.l.ln = nil
	// The engine holds a count in wg until it accepts no more, so that a
	// loop's wg.Add for a new connection never races Shutdown's Wait.
	e.l.wg.Add(1)
	for _, tl := range e.loops {
		go func() {
			if err := tl.ev.Run(); err != nil {
				select {
				case e.errs <- err:
				default:
				}
			}
		}()
	}
	return nil
}

// wait is Serve on the loops: it returns nil once Shutdown began, or the
// error that stopped a loop.
func (e *loopEngine) wait() error {
	select {
	case <-e.l.shutCh:
		return nil
	case err := <-e.errs:
		return err
	}
}

// onLoops runs fn on every loop and waits for them all; it reports false
// when the loops were never started.
func (e *loopEngine) onLoops(fn func(tl *tloop)) bool {
	e.l.cmu.Lock()
	loops := e.loops // set once, by start under cmu
	e.l.cmu.Unlock()
	if loops == nil {
		return false
	}
	// Hand, not Post: a loop whose Run failed runs no task, and waiting
	// for it would hang Shutdown.
	for _, tl := range loops {
		tl.ev.Hand(func() { fn(tl) }, func() {})
	}
	return true
}

// stopAccepting ends accepting on every loop and turns away the queued
// connections (Shutdown, once).
func (e *loopEngine) stopAccepting() {
	started := e.onLoops(func(tl *tloop) {
		tl.acc.Stop()
		for c := tl.conns; c != nil; {
			next := c.next
			if c.state == stQueued {
				c.leaveQueue(RejectShutdown)
			}
			c = next
		}
	})
	if started {
		e.sock.Close()
		e.l.wg.Done()
	}
}

// cutAll closes every connection left at the shutdown deadline and
// returns how many there were.
func (e *loopEngine) cutAll() int {
	var cut atomic.Int64
	e.onLoops(func(tl *tloop) {
		for c := tl.conns; c != nil; {
			next := c.next
			switch c.state {
			case stConnecting:
				cut.Add(1)
				c.cancelAttempt()
			case stForwarding:
				cut.Add(1)
				c.finish(CloseShutdown)
			}
			c = next
		}
	})
	return int(cut.Load())
}

// stop stops the loops once no connection is left, and closes the pipes
// they kept.
func (e *loopEngine) stop() {
	e.stopped.Do(func() {
		e.l.cmu.Lock()
		loops := e.loops
		e.l.cmu.Unlock()
		for _, tl := range loops {
			tl.ev.Close()
		}
		for _, tl := range loops {
			<-tl.ev.Done()
			tl.pipes.Close()
		}
	})
}

func (e *loopEngine) activeConns() int { return int(e.active.Load()) }

// dupSocket is a listener on the loops' socket (Listener.dupSocket);
// under l.cmu, which guards e.sock.
func (e *loopEngine) dupSocket() (*net.TCPListener, error) {
	if e.sock == nil {
		return nil, errors.New("the event loops have not started")
	}
	return e.sock.Listener()
}

// dupListener is a listener on ln's socket, through a duplicate of its
// descriptor: it accepts from the same queue, and stays open when ln is
// closed (an engine change, from the goroutine engine). It is made from
// a descriptor as the loops' own (evloop's DupListener and FileListener),
// not from ln.File: net.FileListener of that file puts the socket, which
// ln shares, in blocking mode for a moment (os.File.Fd), and an Accept
// of ln's that started then blocked in the kernel until the next
// connection came, with ln.Close (Shutdown) waiting for it.
func dupListener(ln *net.TCPListener) (*net.TCPListener, error) {
	fd, err := evloop.DupListener(ln)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return evloop.FileListener(fd)
}

// connState is where a connection is.
type connState uint8

const (
	stQueued     connState = iota + 1 // waiting for a slot under MaxConns
	stConnecting                      // connecting to an endpoint
	stForwarding                      // forwarding both ways
	stDone                            // ended (its struct may be reused)
)

// lconn is one client connection on a loop, from accept to its end. Every
// field is the loop's: no lock.
type lconn struct {
	tl         *tloop
	prev, next *lconn
	s          *settings
	cfd, ufd   int
	src        netip.AddrPort
	state      connState
	admitted   bool // holds a slot under MaxConns
	registered bool // cfd is watched by the loop

	w *waiter // in the queue

	// Connecting.
	up      Upstream
	at      attempts
	res     balance.Result
	es      *epState
	t0      time.Time
	latency time.Duration
	gen     uint32 // a connect attempt's number, kept across reuse: a slow dial's result checks it

	// timer is the queue's wait, then each connect attempt's timeout,
	// then the activity watch (idle timeout and byte counters).
	timer      evloop.Deadline
	pre        []byte // the PROXY header still to send to the endpoint
	dirs       [2]dir // client -> endpoint, endpoint -> client
	lastActive time.Time
	counted    [2]uint64 // bytes of dirs already in the metrics

	grantTask func() // c.granted, made once per struct
	grantFn   func() // c.onGrant, likewise
}

// dir is one direction of a forwarded connection. Its bytes are first
// read into a buffer of the loop's and written on (read(2) and write(2), as
// nginx's stream module moves them): a connection that exchanges a few
// small messages never touches a pipe. A read that fills the buffer marks
// the direction bulk, and from then on src's bytes go through a pipe to dst
// (splice(2): no copy through user space). The buffer and the pipe are
// taken when bytes come and given back when they have all gone out, so an
// idle connection holds neither. Bytes are read from src only when the
// buffer and the pipe are empty: then an EAGAIN means src is empty, and a
// destination that does not drain stops its source (backpressure),
// holding at most a buffer's or a pipe's worth.
type dir struct {
	p        evloop.Pipe
	hasPipe  bool
	inPipe   int    // bytes in the pipe
	buf      []byte // the loop's buffer, while it holds buf[off:end] for dst
	off, end int
	bulk     bool // a read filled the buffer: splice from now on
	srcReady bool // src may have bytes (or its end) to read: told, not yet read to EAGAIN
	// srcClosed: src's peer closed its side (EPOLLRDHUP or a hang-up was
	// told), so a short read is not the end of what there is to read: the
	// end itself is still to come.
	srcClosed bool
	// urgent: src's peer sent urgent data (EPOLLPRI), taken inline (see
	// inlineUrgent). A read stops short at its mark and a splice stops
	// there for good (EAGAIN, or 0 once the end came too): until a read
	// finds src empty, short reads do not end the reading, and a bulk
	// direction whose splice stops reads instead.
	urgent  bool
	dstFull bool // dst's buffer was full: wait until it is told Writable
	eof     bool // src's end was read
	done    bool // eof, and every byte written
	n       uint64
}

// copyBufSize is the loop's buffers' size: nginx stream's default
// proxy_buffer_size. A read that fills one makes its direction bulk.
const copyBufSize = 16 << 10

// maxFreeBufs bounds the empty buffers a loop keeps for the next
// connections (as evloop.DefaultPipes bounds its pipes).
const maxFreeBufs = evloop.DefaultPipes

// pipeSize is the capacity asked for the loops' pipes (0: the kernel's
// default, 64 KiB): what a direction holds at most when its destination
// stalls, and what one splice can move. 1 MiB, as the net package asks
// for its splice pipes (the goroutine engine's): with 64 KiB the loop
// moved bulk at 0.81x and 1.04x the goroutine engine's rate in two
// runs, with 1 MiB at 0.96x and 1.01x and less CPU per GiB (bench/run-tcp.sh,
// loop and goroutine targets, 2026-12-02). The kernel caps it at
// /proc/sys/fs/pipe-max-size, and a user over its pipe-user-pages-soft
// gets smaller pipes, which work too.
var pipeSize = 1 << 20

// spliceMax is what one splice from a socket asks for: at least a pipe's
// capacity (the pipe is empty when it reads).
const spliceMax = 1 << 20

// connEvents: both sockets are registered once, edge-triggered, for
// bytes, room, urgent data and hang-ups.
const connEvents = evloop.Readable | evloop.Writable | evloop.Urgent | evloop.Edge

func (tl *tloop) newConn() *lconn {
	if c, ok := tl.free.Take(); ok {
		return c
	}
	c := &lconn{tl: tl}
	c.timer.Fire = c.onTimer
	c.grantTask, c.grantFn = c.granted, c.onGrant
	return c
}

// recycle keeps c, ended, for the next connection.
func (tl *tloop) recycle(c *lconn) {
	if len(tl.free.Kept()) >= maxFreeConns {
		return
	}
	tried := c.at.info.Tried[:0]
	clear(c.at.info.Tried)
	// The timer is stopped: its value (and the method value its Fire
	// holds) is kept, so that reusing it allocates nothing. gen goes on
	// counting: a dial of the ended connection may still be running on
	// its goroutine, and its result must not match the next connection's
	// attempt.
	*c = lconn{tl: tl, timer: c.timer, grantTask: c.grantTask, grantFn: c.grantFn, pre: c.pre[:0], state: stDone, gen: c.gen}
	c.at.info.Tried = tried
	tl.free.Keep(c, maxFreeConns)
}

func (tl *tloop) link(c *lconn) {
	c.prev, c.next = nil, tl.conns
	if tl.conns != nil {
		tl.conns.prev = c
	}
	tl.conns = c
}

func (tl *tloop) unlink(c *lconn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		tl.conns = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
}

// accept admits a new connection or turns it away.
func (tl *tloop) accept(cfd int, src netip.AddrPort) {
	l := tl.e.l
	l.accepted.Add(1)
	l.lm.accepted.Inc()
	// Accepted while Shutdown stops the loops accepting: it
	// is served and drains with the others. Turning it away would lose it
	// for nothing when the socket lives on (a change of engine hands it to
	// another Listener, whose accept it raced).
	l.wg.Add(1) // the engine's own count is held: no race with Shutdown's Wait
	if !tl.checked {
		tl.checked = true
		tl.preset = tl.e.preset && allOn(cfd, socketOpts)
	}
	c := tl.newConn()
	c.s, c.cfd, c.ufd, c.src = l.set.Load(), cfd, -1, src
	tl.link(c)
	ok, w := l.admit(c.s.cfg.MaxConns, c.s.cfg.QueueSize, c.grantFn)
	switch {
	case ok:
		c.admitted = true
		c.begin()
	case w != nil:
		c.state, c.w = stQueued, w
		tl.ev.SetDeadline(&c.timer, tl.ev.Now().Add(c.s.cfg.QueueTimeout))
	default:
		c.reject(RejectLimit, nil)
	}
}

// onGrant is a queued connection's waiter's grant: it runs under l.amu,
// on any goroutine.
func (c *lconn) onGrant() { c.tl.ev.Post(c.grantTask) }

// granted runs on the loop after a grant: the connection goes on if it is
// still the one queued (the grant may come after it timed out, or for a
// struct since reused).
func (c *lconn) granted() {
	if c.state != stQueued {
		return
	}
	l := c.tl.e.l
	l.amu.Lock()
	ok := c.w.granted
	l.amu.Unlock()
	if ok {
		c.w, c.admitted = nil, true
		c.begin()
	}
}

// leaveQueue ends a queued connection's wait for reason, unless a slot
// was granted meanwhile: then it goes on.
func (c *lconn) leaveQueue(reason string) {
	l := c.tl.e.l
	l.amu.Lock()
	granted := c.w.granted
	if !granted {
		l.unqueueLocked(c.w)
	}
	l.amu.Unlock()
	c.w = nil
	if granted {
		c.admitted = true
		c.begin()
		return
	}
	c.reject(reason, nil)
}

// begin starts an admitted connection: it registers the client and
// connects to the first endpoint.
func (c *lconn) begin() {
	tl, l := c.tl, c.tl.e.l
	tl.e.active.Add(1)
	cfg := &c.s.cfg
	if !tl.preset {
		setAll(c.cfd, socketOpts)
	}
	if tl.e.lingers {
		unix.SetsockoptLinger(c.cfd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{})
	}
	if cfg.IdleTimeout <= 0 {
		setKeepAlive(c.cfd)
	}
	if err := tl.ev.Add(c.cfd, connEvents, (*clientSide)(c)); err != nil {
		c.reject(RejectShutdown, err)
		return
	}
	c.registered = true
	c.up = l.upstreams(cfg.Upstream)
	if c.up == nil {
		c.reject(RejectNoUpstream, fmt.Errorf("upstream %q does not exist", cfg.Upstream))
		return
	}
	c.at.info.Key, c.at.info.HasKey = tl.key(c.src.Addr()), true
	c.state = stConnecting
	c.connect()
}

// socketOpts are set on both sockets of every connection: no Nagle delay,
// as Go's net does for every TCP socket, and urgent data inline (see
// inlineUrgent). A listener's connections get them from the listening
// socket (see presetAccepted).
var socketOpts = []evloop.SockOpt{
	{Level: unix.IPPROTO_TCP, Name: unix.TCP_NODELAY, Value: 1},
	{Level: unix.SOL_SOCKET, Name: unix.SO_OOBINLINE, Value: 1},
}

// keepAliveOpts turn TCP keep-alive on with Go's defaults (15s idle, 15s
// between probes): what guards a connection without an idle timeout.
var keepAliveOpts = []evloop.SockOpt{
	{Level: unix.SOL_SOCKET, Name: unix.SO_KEEPALIVE, Value: 1},
	{Level: unix.IPPROTO_TCP, Name: unix.TCP_KEEPIDLE, Value: 15},
	{Level: unix.IPPROTO_TCP, Name: unix.TCP_KEEPINTVL, Value: 15},
}

func setKeepAlive(fd int) { setAll(fd, keepAliveOpts) }

// allOn reports whether fd has every one of opts.
func allOn(fd int, opts []evloop.SockOpt) bool {
	for _, o := range opts {
		if !o.On(fd) {
			return false
		}
	}
	return true
}

// setAll sets opts on fd. A failure is not the connection's end: the
// options make it better, not possible (as the goroutine engine, which
// leaves the net package's own failures to set them unreported).
func setAll(fd int, opts []evloop.SockOpt) {
	for _, o := range opts {
		o.Set(fd)
	}
}

// presetAccepted reports whether the listening socket lnfd has
// socketOpts, which Linux copies into every connection it accepts: two
// system calls less per connection. Listen sets them before the socket
// listens; those missing are set here if the socket takes them (an MPTCP
// listener, net.Listen's default where the kernel has MPTCP, refuses
// SO_OOBINLINE). Each loop still checks its first connection (see
// tloop.accept) before it relies on them.
func presetAccepted(lnfd int) bool {
	for _, o := range socketOpts {
		if !o.On(lnfd) && o.Set(lnfd) != nil {
			return false
		}
	}
	return true
}

// presetControl is Listen's Control: socketOpts, before the socket
// listens. A failure to set them fails nothing: they make a connection
// better, not possible, and without them each loop sets them on every
// connection (presetAccepted, tloop.accept).
func presetControl(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) { setAll(int(fd), socketOpts) })
}

// connect picks the next endpoint and starts connecting to it, skipping
// endpoints at MaxConnsPerEndpoint, with the pick and outcome semantics of
// the goroutine engine (conn.connect): a failed attempt is Done at once
// with its error and the next endpoint is tried, up to ConnectAttempts.
func (c *lconn) connect() {
	l, cfg := c.tl.e.l, &c.s.cfg
	for {
		res, es, reason, err := c.at.next(l, c.up, cfg)
		if reason != "" {
			c.reject(reason, err)
			return
		}
		ep := res.Endpoint
		c.res, c.es = res, es
		c.gen++
		c.t0 = time.Now()
		c.tl.ev.SetDeadline(&c.timer, c.tl.ev.Now().Add(cfg.ConnectTimeout))
		ap, perr := netip.ParseAddrPort(ep.Address())
		if perr != nil || ap.Addr().Zone() != "" {
			// A host name, or a link-local address whose zone names an
			// interface (evloop.Dial takes none): dialed off the loop.
			c.dialSlow(ep.Address())
			return
		}
		fd, err := evloop.Dial(ap)
		if err == nil {
			if err = c.adopt(fd); err == nil {
				return
			}
		} else {
			err = &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", err)}
		}
		if !c.attemptFailed(err, false) {
			return
		}
	}
}

// adopt makes fd, connecting or connected to c.es's endpoint, the
// connection's upstream side.
func (c *lconn) adopt(fd int) error {
	setAll(fd, socketOpts) // inlineUrgent, as the goroutine engine's dialControl
	if c.s.cfg.IdleTimeout <= 0 {
		setKeepAlive(fd)
	}
	if err := c.tl.ev.Add(fd, connEvents, (*upSide)(c)); err != nil {
		evloop.Close(fd)
		return err
	}
	c.ufd = fd
	return nil
}

// dialSlow dials a host name on a goroutine (its lookup blocks) and
// brings the socket back to the loop.
func (c *lconn) dialSlow(addr string) {
	// The goroutine reads nothing of c: the loop may end c and reuse its
	// struct (recycle rewrites every field) while the dial runs. Only the
	// task it posts, which runs on the loop, looks at c.
	l, ev, gen := c.tl.e.l, c.tl.ev, c.gen
	d := net.Dialer{Timeout: c.s.cfg.ConnectTimeout, Control: dialControl}
	if c.s.cfg.IdleTimeout > 0 {
		d.KeepAlive = -1
	}
	go func() {
		fd, err := evloop.DialBlocking(l.cutCtx, &d, addr)
		ev.Hand(func() {
			if c.gen != gen || c.state != stConnecting || c.ufd >= 0 || l.cutCtx.Err() != nil {
				// Stale, or the shutdown's cut has begun: cutAll, which
				// follows the cancel, ends the connection and counts it
				// as cut (ended here as a failed attempt, it was missed).
				if fd >= 0 {
					evloop.Close(fd)
				}
				return
			}
			if err == nil {
				if err = c.adopt(fd); err == nil {
					c.connected()
					return
				}
			}
			if c.attemptFailed(err, false) {
				c.connect()
			}
		}, func() { // the loops stopped first
			if fd >= 0 {
				evloop.Close(fd)
			}
		})
	}()
}

// attemptFailed reports a failed connect attempt (Done with its error)
// and reports whether the connection should try the next endpoint; if not
// the client has been turned away.
func (c *lconn) attemptFailed(err error, canceled bool) bool {
	l, cfg := c.tl.e.l, &c.s.cfg
	latency := time.Since(c.t0)
	if c.ufd >= 0 {
		c.tl.ev.Forget(c.ufd)
		evloop.Close(c.ufd)
		c.ufd = -1
	}
	es, res := c.es, c.res
	c.es, c.res = nil, balance.Result{}
	if reason, err := c.at.failed(l, c.up, cfg, res, es, err, latency, canceled); reason != "" {
		c.reject(reason, err)
		return false
	}
	return true
}

// cancelAttempt ends a connection still connecting at the shutdown
// deadline, as a canceled dial ends it on the goroutine engine.
func (c *lconn) cancelAttempt() {
	c.gen++
	c.attemptFailed(context.Canceled, true)
}

// errConnectTimeout is a connect attempt's error when ConnectTimeout
// passed first.
var errConnectTimeout = &timeoutError{"connect timed out"}

type timeoutError struct{ s string }

func (e *timeoutError) Error() string { return e.s }
func (e *timeoutError) Timeout() bool { return true }

// onTimer is c.timer's Fire: the queue's or a connect attempt's time is
// up, or the activity watch is due.
func (c *lconn) onTimer() {
	switch c.state {
	case stQueued:
		c.leaveQueue(RejectQueueTimeout)
	case stConnecting:
		c.gen++
		err := &net.OpError{Op: "dial", Net: "tcp", Err: errConnectTimeout}
		if c.attemptFailed(err, false) {
			c.connect()
		}
	case stForwarding:
		c.watch()
	}
}

// connected starts forwarding once the endpoint answered.
func (c *lconn) connected() {
	tl, cfg := c.tl, &c.s.cfg
	c.latency = time.Since(c.t0)
	c.state = stForwarding
	es := c.es
	es.m.connectDelay.Observe(c.latency.Seconds())
	es.total.Add(1)
	es.m.total.Inc()
	es.m.active.Inc()
	if cfg.SendProxyProtocol != "" {
		dst, err := evloop.LocalAddrPort(c.cfd)
		if err != nil {
			c.finish(CloseError)
			return
		}
		c.pre = appendProxyHeader(c.pre[:0], cfg.SendProxyProtocol, c.src, dst)
	}
	c.lastActive = tl.ev.Now()
	// The connect timeout's deadline becomes the watch's: later, so no
	// timer moves until it fires.
	tl.ev.SetDeadline(&c.timer, c.lastActive.Add(c.s.checkEvery))
	c.pump()
}

// watch flushes the byte counters of a long connection into the metrics
// and closes it once it has been idle for IdleTimeout; else it sets
// itself again.
func (c *lconn) watch() {
	now := c.tl.ev.Now()
	c.flushBytes()
	next := now.Add(c.s.checkEvery)
	if idle := c.s.cfg.IdleTimeout; idle > 0 {
		quiet := now.Sub(c.lastActive)
		if quiet >= idle {
			if l := c.tl.e.l; l.log.Enabled(context.Background(), slog.LevelDebug) {
				l.log.Debug("tcp connection idle: closing", "listener", l.name, "client", c.src.String(), "idle", quiet)
			}
			c.finish(CloseIdle)
			return
		}
		if at := c.lastActive.Add(idle); at.Before(next) {
			next = at
		}
	}
	c.tl.ev.SetDeadline(&c.timer, next)
}

func (c *lconn) flushBytes() {
	if d := c.dirs[0].n - c.counted[0]; d > 0 {
		c.es.m.rxDown.Add(d)
		c.counted[0] = c.dirs[0].n
	}
	if d := c.dirs[1].n - c.counted[1]; d > 0 {
		c.es.m.rxUp.Add(d)
		c.counted[1] = c.dirs[1].n
	}
}

// clientSide and upSide are a connection as the handler of its client's
// and its endpoint's socket.
type (
	clientSide lconn
	upSide     lconn
)

func (h *clientSide) OnEvent(_ int, ev evloop.Events) {
	c := (*lconn)(h)
	if ev&(evloop.Readable|evloop.Urgent|evloop.Hangup) != 0 {
		c.dirs[0].srcReady = true
		if ev&(evloop.PeerClosed|evloop.Hangup) != 0 {
			c.dirs[0].srcClosed = true
		}
		if ev&evloop.Urgent != 0 {
			c.dirs[0].urgent = true
		}
	}
	if ev&(evloop.Writable|evloop.Hangup) != 0 {
		c.dirs[1].dstFull = false
	}
	if c.state == stForwarding {
		c.pump()
	}
}

func (h *upSide) OnEvent(_ int, ev evloop.Events) {
	c := (*lconn)(h)
	if ev&(evloop.Readable|evloop.Urgent|evloop.Hangup) != 0 {
		c.dirs[1].srcReady = true
		if ev&(evloop.PeerClosed|evloop.Hangup) != 0 {
			c.dirs[1].srcClosed = true
		}
		if ev&evloop.Urgent != 0 {
			c.dirs[1].urgent = true
		}
	}
	if ev&(evloop.Writable|evloop.Hangup) != 0 {
		c.dirs[0].dstFull = false
	}
	switch c.state {
	case stConnecting:
		if ev&evloop.Hangup != 0 {
			// Refused or unreachable: SO_ERROR says which. (Without a
			// hang-up, Writable alone means connected: no getsockopt.)
			err := evloop.ConnectResult(c.ufd)
			if err == nil {
				err = unix.ECONNRESET
			}
			c.gen++
			if c.attemptFailed(&net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(c.addrPort()), Err: os.NewSyscallError("connect", err)}, false) {
				c.connect()
			}
			return
		}
		if ev&evloop.Writable != 0 {
			c.connected()
		}
	case stForwarding:
		c.pump()
	}
}

// addrPort is the endpoint's address, for errors.
func (c *lconn) addrPort() netip.AddrPort {
	ap, _ := netip.ParseAddrPort(c.res.Endpoint.Address())
	return ap
}

// pump moves what it can both ways, and ends the connection when both
// directions are done or one failed.
func (c *lconn) pump() {
	if len(c.pre) > 0 {
		n, err := evloop.Write(c.ufd, c.pre)
		switch {
		case err == unix.EAGAIN:
		case err != nil:
			c.finish(CloseError)
			return
		default:
			c.pre = c.pre[:copy(c.pre, c.pre[n:])]
		}
	}
	if len(c.pre) == 0 && !c.move(0, c.cfd, c.ufd) {
		return
	}
	if !c.move(1, c.ufd, c.cfd) {
		return
	}
	if c.dirs[0].done && c.dirs[1].done {
		c.finish(CloseDone)
	}
}

// move moves direction i's bytes from src to dst until src is empty or
// dst full: through the loop's buffer, or once the direction is bulk
// through a pipe. It reports false when it ended the connection (an
// error).
func (c *lconn) move(i int, src, dst int) bool {
	d := &c.dirs[i]
	pipes := &c.tl.pipes
	for !d.done {
		if buffered := d.end > d.off; buffered || d.inPipe > 0 {
			// Bytes read wait for dst, in the buffer or the pipe.
			if d.dstFull {
				return true
			}
			var n int
			var err error
			if buffered {
				n, err = evloop.Write(dst, d.buf[d.off:d.end])
			} else {
				n, err = evloop.Splice(d.p.R, dst, d.inPipe)
			}
			switch {
			case err == unix.EAGAIN:
				d.dstFull = true
				return true
			case err != nil:
				c.finish(CloseError)
				return false
			case buffered:
				if d.off += n; d.off == d.end {
					c.tl.putBuf(d)
				}
			default:
				if d.inPipe -= n; d.inPipe == 0 {
					pipes.Put(d.p, true)
					d.hasPipe = false
				}
			}
			continue
		}
		if d.eof {
			d.done = true
			// Pass the end on (half-close); the direction that ends
			// second leaves it to the close, which sends the FIN anyway.
			if !c.dirs[1-i].done {
				if err := evloop.Shutdown(dst, unix.SHUT_WR); err != nil {
					c.finish(CloseError)
					return false
				}
			}
			return true
		}
		if !d.srcReady {
			return true
		}
		if !d.bulk {
			if !c.read(d, src) {
				return false
			}
			continue
		}
		if !d.hasPipe {
			p, err := pipes.Get()
			if err != nil {
				c.tl.e.l.log.Warn("tcp listener: no pipe for splice; closing the connection", "listener", c.tl.e.l.name, "err", err)
				c.finish(CloseError)
				return false
			}
			d.p, d.hasPipe = p, true
		}
		n, err := evloop.Splice(src, d.p.W, spliceMax)
		switch {
		case err == unix.EAGAIN && d.urgent:
			// Stopped at an urgent mark: a read goes past it.
			pipes.Put(d.p, true)
			d.hasPipe = false
			d.bulk = false
		case err == unix.EAGAIN:
			// The pipe is empty, so src is: wait until it is told.
			d.srcReady = false
			pipes.Put(d.p, true)
			d.hasPipe = false
			return true
		case err != nil:
			c.finish(CloseError)
			return false
		case n == 0:
			// The end, or an urgent mark with the end behind it, where
			// splice stops for good (tcp_read_sock): a read tells them
			// apart, taking the urgent byte and what follows, or the end.
			pipes.Put(d.p, true)
			d.hasPipe = false
			d.bulk = false
		default:
			d.inPipe = n
			d.n += uint64(n)
			c.lastActive = c.tl.ev.Now()
		}
	}
	return true
}

// read reads what src has for d into a buffer of the loop's. A read
// shorter than the buffer emptied the socket (a stream socket's read
// returns less only when nothing more is queued; what comes later is told
// anew, the socket being edge-triggered), so d waits for that news rather
// than read again for an EAGAIN, as nginx's recv does with epoll; unless
// src's peer closed, whose end is still to read. A read that fills the
// buffer makes d bulk. It reports false when it ended the connection.
func (c *lconn) read(d *dir, src int) bool {
	tl := c.tl
	if d.buf == nil {
		d.buf = tl.getBuf()
	}
	n, err := evloop.Read(src, d.buf)
	switch {
	case err == unix.EAGAIN:
		d.srcReady, d.urgent = false, false
		tl.putBuf(d)
	case err != nil:
		c.finish(CloseError)
		return false
	case n == 0:
		d.eof = true
		tl.putBuf(d)
	default:
		d.off, d.end = 0, n
		d.n += uint64(n)
		c.lastActive = tl.ev.Now()
		if n == len(d.buf) {
			d.bulk = true
		} else if !d.srcClosed && !d.urgent {
			d.srcReady = false
		}
	}
	return true
}

// getBuf is an empty copy buffer: one the loop kept, or a new one.
func (tl *tloop) getBuf() []byte {
	if b, ok := tl.bufs.Take(); ok {
		return b
	}
	return make([]byte, copyBufSize)
}

// putBuf takes d's buffer back (what it held is written or abandoned).
func (tl *tloop) putBuf(d *dir) {
	if d.buf == nil {
		return
	}
	tl.bufs.Keep(d.buf, maxFreeBufs)
	d.buf, d.off, d.end = nil, 0, 0
}

// finish ends a forwarded connection for cause: counts, reports its pick
// Done, closes both sockets.
func (c *lconn) finish(cause string) {
	tl, l := c.tl, c.tl.e.l
	tl.ev.StopDeadline(&c.timer)
	c.flushBytes()
	l.lm.closed[cause].Inc()
	for i := range c.dirs {
		d := &c.dirs[i]
		if d.hasPipe {
			tl.pipes.Put(d.p, d.inPipe == 0)
			d.hasPipe = false
		}
		tl.putBuf(d)
	}
	if cause == CloseError {
		// A reset, not a FIN, for the peer still there (see conn.abort).
		resetOnClose(c.cfd)
		resetOnClose(c.ufd)
	}
	c.closeSockets()
	es := c.es
	es.m.active.Dec()
	l.eps.release(es)
	c.res.Done(endpoint.Outcome{Latency: c.latency})
	c.end()
}

// resetOnClose has fd's close send a reset (SO_LINGER 0).
func resetOnClose(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
}

func (c *lconn) closeSockets() {
	if c.registered {
		c.tl.ev.Forget(c.cfd)
	}
	evloop.Close(c.cfd)
	if c.ufd >= 0 {
		c.tl.ev.Forget(c.ufd)
		evloop.Close(c.ufd)
	}
}

// reject turns the client away before forwarding and counts why.
func (c *lconn) reject(reason string, err error) {
	l := c.tl.e.l
	c.tl.ev.StopDeadline(&c.timer)
	l.countReject(reason) // before the close: whoever sees the close sees the count
	if err != nil && l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("tcp connection rejected", "listener", l.name, "client", c.src.String(), "reason", reason, "err", err)
	}
	c.closeSockets()
	c.end()
}

// end lets go of what the connection held in the listener, and keeps its
// struct for the next.
func (c *lconn) end() {
	tl, l := c.tl, c.tl.e.l
	c.state = stDone
	if c.admitted {
		l.release()
		tl.e.active.Add(-1)
	}
	tl.unlink(c)
	tl.recycle(c)
	l.wg.Done()
}
