//go:build linux

package h1loop

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/proxy/evloop"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// bodyMode is how a response's body is framed.
type bodyMode uint8

const (
	bodyNone    bodyMode = iota // HEAD, 1xx, 204, 304
	bodyLength                  // Content-Length
	bodyChunked                 // Transfer-Encoding: chunked, passed through
	bodyToClose                 // read to the connection's end
)

// attemptState is where an attempt is.
type attemptState uint8

const (
	attConnecting attemptState = iota
	attWriting
	attHead
	attAnswered // the head is in; the relay has not started
	attRelay
	attDone
)

// upConn is an upstream connection of a loop: serving an attempt, or idle
// in the loop's pool. Registered once, as client connections are
// (connEvents).
type upConn struct {
	socket
	lp      *loop
	addr    string
	a       *attempt // nil: idle
	in      []byte
	idle    evloop.Timer
	idleFor time.Duration
	used    bool // it served an exchange before: a broken reuse may be replayed
	closed  bool
}

// attempt is one exchange with an endpoint.
type attempt struct {
	ex       *exchange
	addr     string
	deadline time.Time
	req      []byte
	wrote    int
	u        *upConn
	t0       time.Time
	timer    evloop.Deadline
	state    attemptState
	replayed bool

	resp     *http.Response
	body     respBody
	mode     bodyMode
	left     int64 // bodyLength: bytes still to come
	chunks   chunkScanner
	reusable bool
	paused   bool
	dropped  atomic.Bool // the call closed the response: it is not relayed
	// gen tells this attempt from the earlier ones the same struct held
	// (an exchange reuses its attempt): a dial finished on a goroutine
	// comes back for the attempt it was made for, or is dropped.
	gen uint32
}

// reset readies a for a new attempt of ex. The attempt it held before is
// over (released: its timer disarmed, its connection given back).
func (a *attempt) reset(ex *exchange, addr string, deadline time.Time, req []byte) *attempt {
	// The deadline is kept as it is: its timer may be armed (see
	// evloop.Deadline).
	gen, dl := a.gen+1, a.timer
	*a = attempt{ex: ex, addr: addr, deadline: deadline, req: req, gen: gen, timer: dl}
	if a.timer.Fire == nil {
		a.timer.Fire = a.timedOut // made once: a method value costs an allocation
	}
	a.body.a = a
	return a
}

func (a *attempt) loop() *loop { return a.ex.c.lp }

// start sends the attempt on a pooled connection, or a new one.
func (a *attempt) start() {
	lp := a.loop()
	a.t0 = lp.now()
	if u := lp.takeIdle(a.addr); u != nil {
		a.use(u)
		a.write()
		return
	}
	a.dial()
}

func (a *attempt) use(u *upConn) {
	a.u, u.a = u, a
	a.state, a.wrote = attWriting, 0
	a.armTimer(0)
}

// armTimer bounds the attempt's current stage by d (0: none) and its
// deadline.
func (a *attempt) armTimer(d time.Duration) {
	lp := a.loop()
	at := a.deadline
	if d > 0 {
		if t := lp.now().Add(d); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	lp.l.SetDeadline(&a.timer, at)
}

// dial connects to the endpoint without blocking: an IP address at once,
// a host name on a goroutine (its lookup blocks).
func (a *attempt) dial() {
	lp := a.loop()
	a.state, a.wrote = attConnecting, 0
	a.armTimer(a.ex.up.ConnectTimeout)
	ap, err := netip.ParseAddrPort(a.addr)
	if err != nil || ap.Addr().Zone() != "" {
		// A host name (its lookup blocks), or a link-local address
		// whose zone names an interface to look up: dialed off the loop.
		a.dialSlow()
		return
	}
	fd, err := evloop.Dial(ap)
	if err != nil {
		a.fail(&h1.ConnectError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}})
		return
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	u := lp.newUpConn(fd, a.addr, a.ex.up.IdleTimeout)
	if err := lp.l.Add(fd, connEvents, u); err != nil {
		unix.Close(fd)
		a.fail(&h1.ConnectError{Err: err})
		return
	}
	a.u, u.a = u, a
}

// dialSlow dials a host name on a goroutine and brings the connection
// back to the loop.
func (a *attempt) dialSlow() {
	lp := a.loop()
	d := net.Dialer{Timeout: a.ex.up.ConnectTimeout, Deadline: a.deadline}
	addr, gen := a.addr, a.gen
	go func() {
		fd, err := evloop.DialBlocking(context.Background(), &d, addr)
		lp.l.Hand(func() {
			if a.gen != gen || a.state != attConnecting || a.ex.att != a {
				if fd >= 0 {
					unix.Close(fd)
				}
				return
			}
			if err != nil {
				a.fail(&h1.ConnectError{Err: err})
				return
			}
			u := lp.newUpConn(fd, addr, a.ex.up.IdleTimeout)
			if err := lp.l.Add(fd, connEvents, u); err != nil {
				unix.Close(fd)
				a.fail(&h1.ConnectError{Err: err})
				return
			}
			a.use(u)
			a.write()
		}, func() { // the loop stopped first
			if fd >= 0 {
				unix.Close(fd)
			}
		})
	}()
}

func (lp *loop) newUpConn(fd int, addr string, idle time.Duration) *upConn {
	u := &upConn{socket: socket{fd: fd}, lp: lp, addr: addr, idleFor: idle}
	u.idle.Fire = u.close
	return u
}

// takeIdle takes the most recently used idle connection to addr.
func (lp *loop) takeIdle(addr string) *upConn {
	idle := lp.pool[addr]
	if len(idle) == 0 {
		return nil
	}
	u := idle[len(idle)-1]
	idle[len(idle)-1] = nil
	lp.pool[addr] = idle[:len(idle)-1]
	lp.l.Disarm(&u.idle)
	return u
}

// OnEvent moves the attempt on, or closes an idle connection the
// endpoint closed (or sent bytes nobody asked for on).
func (u *upConn) OnEvent(fd int, ev evloop.Events) {
	u.told(ev)
	a := u.a
	if a == nil {
		if u.more {
			u.close()
		}
		return
	}
	switch a.state {
	case attConnecting:
		errno, err := unix.GetsockoptInt(u.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && errno != 0 {
			err = syscall.Errno(errno)
		}
		if err != nil {
			a.fail(&h1.ConnectError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}})
			return
		}
		a.state = attWriting
		a.armTimer(0)
		a.write()
	case attWriting:
		if ev&evloop.Writable != 0 {
			a.write()
		}
	case attHead:
		if u.more {
			a.readHead()
		}
	case attRelay:
		// Paused: what came is read when the client drains.
		if u.more && !a.paused {
			a.readBody()
		}
	}
	// attAnswered: the call decides; what came is read by the relay.
}

func (u *upConn) close() {
	if u.closed {
		return
	}
	u.closed = true
	u.lp.l.Disarm(&u.idle)
	if idle := u.lp.pool[u.addr]; len(idle) > 0 {
		for i, v := range idle {
			if v == u {
				u.lp.pool[u.addr] = append(idle[:i], idle[i+1:]...)
				break
			}
		}
	}
	u.lp.l.Remove(u.fd)
	unix.Close(u.fd)
}

// write writes the request.
func (a *attempt) write() {
	u := a.u
	for a.wrote < len(a.req) {
		n, err := evloop.Write(u.fd, a.req[a.wrote:])
		if err == unix.EAGAIN {
			return // Writable comes
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			a.broken(&net.OpError{Op: "write", Net: "tcp", Err: err})
			return
		}
		a.wrote += n
	}
	a.state = attHead
	a.armTimer(a.ex.up.ResponseHeaderTimeout)
	if u.more {
		// Bytes came before the answer could have (a closing
		// endpoint's EOF, say): see what they are.
		a.readHead()
	}
	// Else the answer is told of (Readable): no read is spent to learn
	// that it has not come yet.
}

// broken fails an attempt whose connection broke before any response
// byte: on a reused connection a replayable request goes once more on a
// new one, as proxy/h1's Client does.
func (a *attempt) broken(err error) {
	if a.u.used && !a.replayed && len(a.u.in) == 0 && a.replayable() {
		a.replayed = true
		a.u.a = nil
		a.u.close()
		a.u = nil
		a.dial()
		return
	}
	a.fail(err)
}

func (a *attempt) replayable() bool {
	r := a.ex.req
	if r.ContentLength > 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

// readHead reads until the response head is in, then hands it to the
// call.
func (a *attempt) readHead() {
	u := a.u
	maxHead := a.ex.up.MaxResponseHeaderBytes
	if maxHead <= 0 {
		maxHead = h1.DefaultMaxResponseHeaderBytes
	}
	for {
		if end := h1.HeadEnd(u.in); end >= 0 {
			if end > maxHead {
				a.fail(h1.ErrResponseHeaderTooLarge)
				return
			}
			if a.gotHead(end) {
				return
			}
			continue // an interim answer skipped
		}
		if len(u.in) > maxHead {
			a.fail(h1.ErrResponseHeaderTooLarge)
			return
		}
		if cap(u.in)-len(u.in) < readChunk/2 {
			grown := make([]byte, len(u.in), max(2*cap(u.in), 2*readChunk))
			copy(grown, u.in)
			u.in = grown
		}
		if !u.more {
			return // the rest is told of
		}
		n, err := u.socket.read(u.in[len(u.in):cap(u.in)])
		switch {
		case err == io.EOF:
			a.broken(&net.OpError{Op: "read", Net: "tcp", Err: io.ErrUnexpectedEOF})
			return
		case err != nil:
			a.broken(&net.OpError{Op: "read", Net: "tcp", Err: err})
			return
		case n == 0:
			return // the rest is told of
		}
		u.in = u.in[:len(u.in)+n]
	}
}

// gotHead parses the response head of length end and hands it to the
// call; false when it was an interim answer (1xx but 101) to skip.
func (a *attempt) gotHead(end int) bool {
	u := a.u
	var ru *h1.Reuse
	if !a.ex.parsedRu {
		a.ex.parsedRu = true
		ru = &a.ex.respRu
	}
	resp, err := h1.ParseResponseHeadReusing(u.in[:end], a.ex.req, ru)
	if err != nil {
		a.fail(err)
		return true
	}
	u.in = u.in[:copy(u.in, u.in[end:])]
	if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		// An interim answer (100, 102, 103 Early Hints): the final one
		// follows, as proxy/h1's Client reads it.
		return false
	}
	if resp.StatusCode < 200 {
		a.fail(errors.New("h1loop: unexpected informational response " + strconv.Itoa(resp.StatusCode)))
		return true
	}
	a.reusable = !resp.Close
	switch {
	case h1.BodylessResponse(a.ex.req.Method, resp.StatusCode):
		a.mode = bodyNone
	case len(resp.TransferEncoding) > 0:
		a.mode = bodyChunked
	case resp.ContentLength >= 0:
		a.mode, a.left = bodyLength, resp.ContentLength
	default:
		a.mode, a.reusable = bodyToClose, false
	}
	resp.Body = &a.body
	a.resp = resp
	a.state = attAnswered
	a.armTimer(0)
	a.ex.answered(resp, nil)
	return true
}

// respBody is the Body the call sees of a response the loop relays: the
// loop reads it itself. A call that drops the response (to retry) reads
// nothing and closes it, which closes the connection.
type respBody struct{ a *attempt }

var errRelayed = errors.New("h1loop: the body is relayed by the loop")

func (b *respBody) Read([]byte) (int, error) { return 0, errRelayed }
func (b *respBody) Close() error {
	// Maybe off the loop (a fallback step runs on Block's goroutine):
	// the loop closes the connection at its next step.
	b.a.dropped.Store(true)
	return nil
}

// relay starts relaying the body to the client.
func (a *attempt) relay() {
	a.state = attRelay
	if a.mode == bodyNone || a.mode == bodyLength && a.left == 0 {
		// No body byte to wait for: a Content-Length of 0 ends here,
		// or the exchange would wait on the endpoint's next bytes.
		a.end(nil)
		return
	}
	if len(a.u.in) > 0 {
		b := a.u.in
		a.u.in = a.u.in[:0]
		if !a.feed(b) {
			return
		}
	}
	a.readBody()
}

// resumeRelay goes on once the client took what was pending.
func (a *attempt) resumeRelay() {
	if a.state != attRelay || !a.paused {
		return
	}
	a.paused = false
	a.readBody()
}

// readBody reads the body and passes it on while the client takes it.
func (a *attempt) readBody() {
	u := a.u
	if cap(u.in) < 2*readChunk {
		u.in = make([]byte, 0, 2*readChunk)
	}
	for a.state == attRelay && !a.paused {
		if !u.more {
			// The rest is told of. Meanwhile the client has what came
			// (a head waiting for its body's first bytes goes now).
			a.ex.c.flush()
			return
		}
		n, err := u.socket.read(u.in[:cap(u.in)])
		switch {
		case err == io.EOF:
			if a.mode == bodyToClose {
				a.end(nil)
			} else {
				a.end(io.ErrUnexpectedEOF)
			}
			return
		case err != nil:
			a.end(&net.OpError{Op: "read", Net: "tcp", Err: err})
			return
		case n == 0:
			continue // nothing now: the client gets what came, the rest is told of
		}
		if !a.feed(u.in[:n]) {
			return
		}
	}
}

// feed passes body bytes b to the client. It reports false when the
// relay stopped: the body ended, or the client is full (paused), or gone.
func (a *attempt) feed(b []byte) bool {
	var take int
	finished := false
	switch a.mode {
	case bodyLength:
		take = int(min(int64(len(b)), a.left))
		a.left -= int64(take)
		finished = a.left == 0
	case bodyChunked:
		var err error
		take, finished, err = a.chunks.scan(b)
		if err != nil {
			a.writeClient(b[:take])
			a.end(err)
			return false
		}
	default:
		take = len(b)
	}
	if take < len(b) {
		a.reusable = false // the endpoint sent more than its body
	}
	if finished {
		// The call ends before the client has its last bytes (report).
		ex := a.ex
		a.state = attDone
		a.release(a.reusable)
		ex.src = nil
		ex.out += int64(take)
		ex.report()
		if take > 0 && !ex.c.write(b[:take]) {
			ex.clientGone()
			return false
		}
		ex.bodyDone(nil)
		return false
	}
	if !a.writeClient(b[:take]) {
		return false
	}
	if len(a.ex.c.out) > 0 {
		a.paused = true
		a.ex.clientStalled()
		return false
	}
	return true
}

// writeClient writes body bytes to the client; false when it is gone.
func (a *attempt) writeClient(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	c := a.ex.c
	if !c.write(b) {
		a.ex.clientGone()
		return false
	}
	a.ex.out += int64(len(b))
	return true
}

// end ends the relay; err cut the body short.
func (a *attempt) end(err error) {
	if a.state == attDone {
		return
	}
	a.state = attDone
	a.release(err == nil && a.reusable)
	a.ex.src = nil
	a.ex.bodyDone(err)
}

// timedOut ends a stage that took too long.
func (a *attempt) timedOut() {
	switch a.state {
	case attConnecting:
		a.fail(&h1.ConnectError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: errTimeout}})
	case attWriting, attHead:
		err := h1.ErrRequestTimeout
		if a.ex.up.ResponseHeaderTimeout > 0 && (a.deadline.IsZero() || a.loop().now().Before(a.deadline)) {
			err = h1.ErrHeaderTimeout
		}
		a.fail(err)
	case attRelay:
		a.end(h1.ErrRequestTimeout)
	}
}

// fail ends the attempt with err before its response.
func (a *attempt) fail(err error) {
	if a.ex.att != a {
		return
	}
	a.ex.answered(nil, err)
}

// release gives the connection back to the pool (reusable) or closes it.
func (a *attempt) release(reusable bool) {
	lp := a.loop()
	lp.l.SetDeadline(&a.timer, time.Time{})
	if a.state != attDone {
		a.state = attDone
	}
	u := a.u
	if u == nil {
		return
	}
	a.u, u.a = nil, nil
	if reusable && u.more && !u.closing {
		// The last read filled the buffer, so the socket may hold more,
		// or be empty (the body ended there): one read tells. A byte
		// there is one nobody asked for, and the end is the end.
		var probe [1]byte
		if n, err := u.socket.read(probe[:]); n != 0 || err != nil {
			reusable = false
		}
	}
	max := a.ex.up.MaxIdlePerEndpoint
	if !reusable || u.more || len(u.in) > 0 || lp.s.closing.Load() || max <= 0 || len(lp.pool[u.addr]) >= max {
		// (more: bytes or a hang-up came that were not read: not a
		// connection to use again.)
		u.close()
		return
	}
	u.used = true
	u.in = u.in[:0]
	if u.idleFor > 0 {
		lp.l.Arm(&u.idle, lp.now().Add(u.idleFor))
	}
	lp.pool[u.addr] = append(lp.pool[u.addr], u)
}

// writeRequest is the request as it goes upstream, as proxy/h1's Client
// writes it: the request line, Host, the header, and Content-Length for a
// body (or 0 for a method that expects one), then the body.
func writeRequest(b []byte, r *http.Request, body []byte) []byte {
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, h1.RequestURI(r)...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\n"...)
	for k, vv := range r.Header {
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	switch {
	case body != nil:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		b = append(b, "Content-Length: 0\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}
