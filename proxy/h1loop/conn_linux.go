//go:build linux

package h1loop

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/proxy/evloop"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// conn is a client connection on a loop, registered once (socket).
type conn struct {
	socket
	lp     *loop
	remote string
	in     []byte          // read, not yet served (the next requests' bytes)
	out    []byte          // written by the loop, not yet taken by the socket
	timer  evloop.Deadline // waiting for a request or its head, or for the client to read
	ex     *exchange       // the request being served, or nil
	first  bool            // no request served yet
	eof    bool            // the client closed its side: serve what is in, then close
	closed bool
	// headStart is when the first byte of the pending head came.
	headStart time.Time

	// What the connection's requests reuse (so that a keep-alive request
	// costs no allocation of the loop's own): the parser's header map and
	// base request (whose context is ctx), the exchange and the Handler's
	// last Exchange.
	ctx    context.Context
	cancel context.CancelFunc
	ru     h1.Reuse
	exs    exchange
	lastX  Exchange
}

func newConn(lp *loop, fd int, remote string) *conn {
	c := &conn{socket: socket{fd: fd}, lp: lp, remote: remote, first: true}
	c.timer.Fire = c.timedOut
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.ru.Base = new(http.Request).WithContext(c.ctx)
	return c
}

func (c *conn) settings() *Settings { return c.lp.s.settings.Load() }

// OnEvent reads requests, or writes what is pending.
func (c *conn) OnEvent(fd int, ev evloop.Events) {
	if ev&evloop.Writable != 0 && len(c.out) > 0 {
		if !c.flush() {
			return
		}
		if len(c.out) == 0 && c.ex != nil {
			c.ex.clientDrained()
			if c.closed {
				return
			}
		}
	}
	c.told(ev)
	if c.ex != nil {
		if ev&evloop.Hangup != 0 {
			// The client went while its request was served.
			c.ex.clientGone()
		}
		// Pipelined bytes wait in the socket (more is set) until the
		// answer is out.
		return
	}
	if c.more {
		c.read()
	}
}

// read takes what the socket holds, then serves the requests it makes.
func (c *conn) read() {
	st := c.settings()
	limit := st.MaxHeaderBytes + 4096 + st.MaxBody
	for c.more && !c.eof && len(c.in) < limit {
		if cap(c.in) == 0 {
			c.in = c.lp.buffer()
		} else if cap(c.in)-len(c.in) < clientBuffer/2 {
			grown := make([]byte, len(c.in), 2*cap(c.in))
			copy(grown, c.in)
			c.lp.release(c.in)
			c.in = grown
		}
		n, err := c.socket.read(c.in[len(c.in):cap(c.in)])
		if err != nil {
			c.eof = true
			break
		}
		if n == 0 {
			break
		}
		if len(c.in) == 0 {
			c.headStart = c.lp.now()
		}
		c.in = c.in[:len(c.in)+n]
	}
	c.serve()
}

// serve serves the next request when it has all arrived, hands the
// connection over when it is one the loop does not serve, and closes it
// when the client is done.
func (c *conn) serve() {
	if c.closed || c.ex != nil {
		return
	}
	st := c.settings()
	if len(c.in) == 0 {
		if c.more && !c.eof {
			c.read()
			return
		}
		if c.eof || c.lp.s.closing.Load() {
			c.close()
			return
		}
		// Waiting for the next request: the buffer is the loop's
		// until it comes.
		c.lp.release(c.in)
		c.in = nil
		c.armWait()
		return
	}
	end := h1.HeadEnd(c.in)
	if end < 0 {
		if len(c.in) > st.MaxHeaderBytes+4096 || c.eof {
			// The goroutine engine answers it (431, 400) as it does.
			c.handOff()
			return
		}
		if c.more && !c.eof {
			c.read()
			return
		}
		c.armHead(st)
		return
	}
	req, ok := h1.ParseRequestHeadReusing(c.in[:end], &c.ru)
	if !ok || !servable(req, end, st) {
		c.handOff()
		return
	}
	n := end + int(req.ContentLength)
	if len(c.in) < n {
		// A body that did not come with its head may be slow: the
		// goroutine engine reads it, under the body timeout.
		c.handOff()
		return
	}
	if req.ContentLength > 0 {
		req.Body = newBody(bytes.Clone(c.in[end:n]))
	}
	req.RemoteAddr = c.remote
	now := c.lp.now()
	x := c.lp.s.h.Begin(req, now, c.lastX)
	if x == nil {
		c.handOff()
		return
	}
	c.lastX = x
	c.lp.l.SetDeadline(&c.timer, time.Time{})
	c.in = c.in[:copy(c.in, c.in[n:])]
	c.first = false
	// While the request is served the loop reads nothing more from the
	// client (pipelined requests wait in the socket); it hears of a
	// hang-up.
	c.ex = c.exs.reset(c, req, x)
	c.ex.start(now)
}

// servable reports whether the loop serves a request the fast parser
// took itself: HTTP/1.1, no protocol switch, no 100-continue (the
// goroutine engine answers it, or refuses another Expect), not CONNECT, a
// head within the cap and a small body.
func servable(req *http.Request, headLen int, st *Settings) bool {
	if req.ProtoMinor != 1 || req.Method == http.MethodConnect || headLen > st.MaxHeaderBytes {
		return false
	}
	if _, ok := req.Header["Expect"]; ok {
		return false
	}
	if _, ok := req.Header["Upgrade"]; ok {
		return false
	}
	return req.ContentLength <= int64(st.MaxBody)
}

// armWait times the wait for the next request: the read-header timeout
// before the first one, the idle timeout after.
func (c *conn) armWait() {
	st := c.settings()
	d := st.IdleTimeout
	if c.first && st.ReadHeaderTimeout > 0 {
		d = st.ReadHeaderTimeout
	}
	at := time.Time{}
	if d > 0 {
		at = c.lp.now().Add(d)
	}
	c.lp.l.SetDeadline(&c.timer, at)
}

// armHead times a head that is coming: the read-header timeout from its
// first byte.
func (c *conn) armHead(st *Settings) {
	at := time.Time{} // none: the idle timeout is for a wait between requests
	if st.ReadHeaderTimeout > 0 {
		at = c.headStart.Add(st.ReadHeaderTimeout)
	}
	c.lp.l.SetDeadline(&c.timer, at)
}

// timedOut closes a connection whose client was quiet too long: waiting
// for a request or its head, or not reading a response.
func (c *conn) timedOut() {
	if c.ex != nil {
		c.ex.clientGone()
		return
	}
	c.close()
}

// write sends b to the client after what is pending (a head written
// with writeHead goes out with the first body bytes, in one write), and
// keeps what the socket does not take. It reports false when the
// connection broke (and is closed, or its exchange ended).
func (c *conn) write(b []byte) bool {
	if len(c.out) > 0 && len(b) >= writevAt {
		return c.writev(b)
	}
	if len(c.out) > 0 {
		c.out = append(c.out, b...)
		return c.flush()
	}
	for len(b) > 0 {
		n, err := evloop.Write(c.fd, b)
		if err == unix.EAGAIN {
			break
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.broke()
			return false
		}
		b = b[n:]
	}
	if len(b) > 0 {
		c.out = append(c.out[:0], b...)
	}
	return true
}

// writevAt is the size from which body bytes written after a pending
// head go out with it in one writev rather than being copied after it.
const writevAt = 2 << 10

// writev writes what is pending then b in one call, keeping what the
// socket does not take; false when the connection broke.
func (c *conn) writev(b []byte) bool {
	for {
		n, err := evloop.Writev(c.fd, c.out, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			n = 0
		} else if err != nil {
			c.broke()
			return false
		}
		if n < len(c.out) {
			c.out = append(c.out[:copy(c.out, c.out[n:])], b...)
		} else {
			c.out = append(c.out[:0], b[n-len(c.out):]...)
		}
		return true
	}
}

// flush writes what is pending; false when the connection broke. What
// the socket does not take waits for room (Writable).
func (c *conn) flush() bool {
	for len(c.out) > 0 {
		n, err := evloop.Write(c.fd, c.out)
		if err == unix.EAGAIN {
			return true
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.broke()
			return false
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	return true
}

// broke ends a connection a write failed on.
func (c *conn) broke() {
	if c.ex != nil {
		c.ex.clientGone()
	} else {
		c.close()
	}
}

// handOff gives the connection, its unserved bytes first, to the
// goroutine engine.
func (c *conn) handOff() {
	c.stopTimers()
	c.cancel()
	c.closed = true
	delete(c.lp.conns, c)
	c.lp.n.Add(-1)
	nc, err := c.lp.l.Handoff(c.fd, c.in)
	c.lp.s.connGone()
	if err != nil {
		return // (the descriptor is closed)
	}
	c.lp.s.handoff(nc)
}

// stopTimers disarms the connection's deadlines for good, its attempt's
// included: a cleared deadline's timer stays armed until it fires, and
// would hold the connection that long.
func (c *conn) stopTimers() {
	c.lp.l.StopDeadline(&c.timer)
	c.lp.l.StopDeadline(&c.exs.atts.timer)
}

// close closes the connection.
func (c *conn) close() {
	if c.closed {
		return
	}
	c.closed = true
	c.cancel()
	c.stopTimers()
	c.lp.l.Remove(c.fd)
	unix.Close(c.fd)
	c.lp.release(c.in)
	c.in = nil
	delete(c.lp.conns, c)
	c.lp.n.Add(-1)
	c.lp.s.connGone()
}
