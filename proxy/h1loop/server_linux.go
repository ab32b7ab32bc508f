//go:build linux

package h1loop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/proxy/evloop"
)

// Server serves one listening socket on event loops of its own.
type Server struct {
	h       Handler
	handoff func(net.Conn)
	// sock is the listening socket, watched by every loop: the Server's
	// only descriptor of it (New closes the listener it came from);
	// stopAccepting closes it.
	sock     *evloop.Socket
	loops    []*loop
	settings atomic.Pointer[Settings]

	conns     atomic.Int64 // client connections on the loops
	closing   atomic.Bool  // Shutdown: no new connections, none kept alive
	idleDone  chan struct{}
	idleOnce  sync.Once
	closeOnce sync.Once
	once      sync.Once
}

const (
	defaultMaxHeader = 1 << 20
	defaultMaxBody   = 64 << 10
	readChunk        = 16 << 10 // an upstream connection's read buffer is twice this
	// clientBuffer is a client connection's read buffer to begin with: a
	// request head fits (nginx's client_header_buffer_size is 1 KiB); a
	// larger head or a body grows it.
	clientBuffer = 4 << 10
)

// New serves ln (a *net.TCPListener) on loops event loops (0:
// evloop.DefaultLoops()), each accepting from its socket. Requests the
// loops do not serve themselves go, with their connection, to handoff,
// which must not block (it runs on a loop).
//
// On success the Server owns the socket: New closes ln, keeping a
// descriptor of its own, and Shutdown or Close closes that. ln is closed
// because the runtime's poller watches it, and each connection that
// comes would wake one of the runtime's threads for nothing (the loops
// accept it); a goroutine blocked in ln.Accept gets net.ErrClosed, so
// stop accepting from ln before New. Listener gives a net.Listener on the
// socket back, for the goroutine engine to take it over. When New fails,
// ln is left open, the caller's as before.
func New(ln net.Listener, h Handler, handoff func(net.Conn), st Settings, loops int) (*Server, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("h1loop: %T is not a TCP listener", ln)
	}
	sock, err := evloop.TakeSocket(tl)
	if err != nil {
		return nil, fmt.Errorf("h1loop: %w", err)
	}
	if loops <= 0 {
		loops = evloop.DefaultLoops()
	}
	s := &Server{h: h, handoff: handoff, sock: sock, idleDone: make(chan struct{})}
	s.SetSettings(st)
	for i := 0; i < loops; i++ {
		el, err := evloop.New()
		if err != nil {
			s.stopLoops()
			sock.Close()
			return nil, err
		}
		lp := &loop{s: s, l: el, pool: map[string][]*upConn{}, conns: map[*conn]struct{}{}}
		lp.acc.Take = lp.accept
		lp.acc.Failed = lp.acceptFailed
		lp.acc.Batch = evloop.AcceptBatch(loops)
		if err := lp.acc.Watch(el, sock.FD()); err != nil {
			el.Close()
			s.stopLoops()
			sock.Close()
			return nil, err
		}
		s.loops = append(s.loops, lp)
	}
	// The loops have the socket: the runtime's poller lets go of it.
	tl.Close()
	for _, lp := range s.loops {
		go lp.l.Run()
	}
	return s, nil
}

// Listener returns a new listener on the socket the loops serve, made
// from a duplicate of their descriptor: it accepts from the same queue,
// so the goroutine engine can take the socket over without losing a
// connection waiting in it (accept from the listener, then Shutdown the
// loops: a connection either side took is served). The listener is the
// caller's, open after Shutdown and Close. It fails once the loops have
// stopped accepting (Shutdown, Close): their descriptor is closed.
func (s *Server) Listener() (*net.TCPListener, error) {
	ln, err := s.sock.Listener()
	if err != nil {
		return nil, fmt.Errorf("h1loop: %w", err)
	}
	return ln, nil
}

// SetSettings changes the client-side limits; each connection takes them
// for its next request.
func (s *Server) SetSettings(st Settings) {
	if st.MaxHeaderBytes <= 0 {
		st.MaxHeaderBytes = defaultMaxHeader
	}
	if st.MaxBody <= 0 {
		st.MaxBody = defaultMaxBody
	}
	s.settings.Store(&st)
}

// Shutdown stops accepting, closes idle connections, lets the others
// finish the response under way (they close after it), and returns once
// none is left or ctx ends (then with its error; Close ends the rest).
// Connections handed to the goroutine engine are its own to drain.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	for _, lp := range s.loops {
		lp.l.Post(lp.closeIdle)
	}
	select {
	case <-s.idleDone:
		s.Close() // the idle upstream connections
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Forget closes the loops' idle connections to the endpoints at addrs,
// which left their upstream (as h1.Client's Forget does): without it they
// would stay open until their idle timeout. It does not wait.
func (s *Server) Forget(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	addrs = append([]string(nil), addrs...)
	for _, lp := range s.loops {
		lp.l.Post(func() {
			for _, a := range addrs {
				for _, u := range append([]*upConn(nil), lp.pool[a]...) {
					u.close()
				}
				delete(lp.pool, a)
			}
		})
	}
}

// Close closes every connection, client and upstream, and stops the
// loops.
func (s *Server) Close() error {
	s.stopAccepting()
	s.closeOnce.Do(func() {
		// Hand, not Post: a loop whose Run failed runs no task, and
		// waiting for it would hang.
		for _, lp := range s.loops {
			lp.l.Hand(lp.closeAll, func() {})
		}
		s.stopLoops()
	})
	return nil
}

func (s *Server) stopAccepting() {
	s.once.Do(func() {
		s.closing.Store(true)
		for _, lp := range s.loops {
			lp.l.Hand(lp.acc.Stop, func() {})
		}
		s.sock.Close()
		if s.conns.Load() == 0 {
			s.idleOnce.Do(func() { close(s.idleDone) })
		}
	})
}

func (s *Server) stopLoops() {
	for _, lp := range s.loops {
		lp.l.Close()
	}
	for _, lp := range s.loops {
		<-lp.l.Done()
	}
}

// connGone counts a client connection off; the last one ends a Shutdown.
func (s *Server) connGone() {
	if s.conns.Add(-1) == 0 && s.closing.Load() {
		s.idleOnce.Do(func() { close(s.idleDone) })
	}
}

// connEvents is what client and upstream connections are registered for,
// once: bytes coming, room freeing up, told once each (Edge).
const connEvents = evloop.Readable | evloop.Writable | evloop.Edge

// loop is one event loop's state: its client connections and its pool of
// idle upstream connections.
type loop struct {
	s     *Server
	l     *evloop.Loop
	acc   evloop.Acceptor
	n     atomic.Int64         // client connections, for the other loops' accept to read
	pool  map[string][]*upConn // idle, by endpoint address, most recent last
	conns map[*conn]struct{}
	// The Date field's value, made once a second.
	date    []byte
	dateSec int64
	// free holds read buffers of client connections that wait for their
	// next request: an idle keep-alive connection holds none.
	free evloop.Free[[]byte]
}

// maxFreeBuffers bounds the read buffers a loop keeps for later (4 MiB):
// enough for a thousand connections' requests at once without making new
// ones as they come and go.
const maxFreeBuffers = 1024

// buffer returns an empty read buffer of clientBuffer bytes' capacity.
func (lp *loop) buffer() []byte {
	if b, ok := lp.free.Take(); ok {
		return b
	}
	return make([]byte, 0, clientBuffer)
}

// release keeps b, a read buffer nothing refers to any more, for later.
func (lp *loop) release(b []byte) {
	if cap(b) == clientBuffer {
		lp.free.Keep(b[:0], maxFreeBuffers)
	}
}

// dateValue is the Date field's value for now, the loop's clock: made
// again only when the second changes.
func (lp *loop) dateValue() []byte {
	now := lp.now()
	if sec := now.Unix(); sec != lp.dateSec || lp.date == nil {
		lp.date = now.UTC().AppendFormat(lp.date[:0], http.TimeFormat)
		lp.dateSec = sec
	}
	return lp.date
}

// accept takes a new connection (evloop.Acceptor's Take). When another
// loop has at least two connections fewer, the connection goes to the
// loop with the fewest, so the loops stay within two of each other (one
// apart would move every other connection of a steady stream). Which loop
// a readiness event wakes is the kernel's choice, and a burst of new
// connections (a load generator's, a client pool's) could leave one loop
// with most of them and the other idle, which cost up to a fifth of the
// requests a second in rounds of bench/run-http.sh. A keep-alive
// connection stays where it is put, so the move is paid once, by a
// connection that would otherwise have crowded a busy loop.
func (lp *loop) accept(nfd int, remote netip.AddrPort) {
	s := lp.s
	if s.closing.Load() {
		unix.Close(nfd)
		return
	}
	s.conns.Add(1) // from here on, Shutdown waits for it
	if t := s.lighter(lp); t != nil {
		t.n.Add(1)
		// PostOr: this loop does not wait for the other, and a
		// descriptor the stopped loop never took is closed. (A goroutine
		// per move, waiting in Hand, cost a thread's wake-up per
		// connection.)
		t.l.PostOr(func() { t.adopt(nfd, remote) }, func() {
			t.n.Add(-1)
			unix.Close(nfd)
			s.connGone()
		})
		return
	}
	lp.n.Add(1)
	lp.adopt(nfd, remote)
}

// lighter returns the loop with the fewest client connections when it has
// at least two fewer than lp, else nil.
func (s *Server) lighter(lp *loop) *loop {
	if len(s.loops) < 2 {
		return nil
	}
	var best *loop
	least := lp.n.Load() - 1
	for _, o := range s.loops {
		if n := o.n.Load(); o != lp && n < least {
			best, least = o, n
		}
	}
	return best
}

// adopt serves a new connection on lp, which counts it already (lp.n, and
// the server's conns).
func (lp *loop) adopt(nfd int, remote netip.AddrPort) {
	unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c := newConn(lp, nfd, remote.String())
	if err := lp.l.Add(nfd, connEvents, c); err != nil {
		unix.Close(nfd)
		lp.n.Add(-1)
		lp.s.connGone()
		return
	}
	lp.conns[c] = struct{}{}
	c.armWait()
	if lp.s.closing.Load() {
		// Handed over from another loop after Shutdown began, maybe
		// after this loop's closeIdle: the grace it gives applies.
		c.graceFirst()
	}
}

// LoopConns returns the client connections each loop serves now.
func (s *Server) LoopConns() []int {
	n := make([]int, len(s.loops))
	for i, lp := range s.loops {
		n[i] = int(lp.n.Load())
	}
	return n
}

// acceptFailed passes an accept that failed on (Settings.AcceptFailed).
func (lp *loop) acceptFailed(err error, retry time.Duration) {
	if f := lp.s.settings.Load().AcceptFailed; f != nil {
		f(err, retry)
	}
}

// freshGrace is how long a drain leaves a connection that has not sent
// its first request (net/http waits as long): its request may be on its
// way, and a client does not retry a first request that got a reset.
const freshGrace = 5 * time.Second

// graceFirst gives a connection that has not sent its first request the
// drain's grace: it is served if its request comes (and closed after the
// answer, the server closing), else closed by its timer.
func (c *conn) graceFirst() {
	d := freshGrace
	if rh := c.settings().ReadHeaderTimeout; rh > 0 && rh < d {
		d = rh
	}
	c.lp.l.SetDeadline(&c.timer, c.lp.now().Add(d))
}

func (lp *loop) closeIdle() {
	for c := range lp.conns {
		if c.ex != nil || len(c.in) > 0 {
			continue
		}
		if c.first && !c.eof {
			c.graceFirst()
			continue
		}
		c.close()
	}
}

func (lp *loop) closeAll() {
	for c := range lp.conns {
		if c.ex != nil {
			c.ex.abort(errors.New("h1loop: server closed"))
		}
		c.close()
	}
	for addr, idle := range lp.pool {
		for _, u := range idle {
			u.close()
		}
		delete(lp.pool, addr)
	}
}

var errTimeout = timeoutError("h1loop: timeout")

type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// now is the loop's clock.
func (lp *loop) now() time.Time { return lp.l.Now() }
