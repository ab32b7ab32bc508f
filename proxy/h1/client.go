package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ClientConfig tunes a Client.
type ClientConfig struct {
	// ConnectTimeout bounds dialing an endpoint.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response header once
	// the request is sent (0: only the request's own deadline does).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes connections idle for longer (0: never).
	IdleTimeout time.Duration
	// MaxIdlePerEndpoint caps the idle connections kept per endpoint.
	MaxIdlePerEndpoint int
	// MaxResponseHeaderBytes caps the response head (status line and
	// header, with any 1xx heads before it); 0 means
	// DefaultMaxResponseHeaderBytes. A longer head fails the exchange with
	// ErrResponseHeaderTooLarge and its connection is closed.
	MaxResponseHeaderBytes int64
	// Dial, when set, opens the connections instead of a TCP dial: a TLS
	// connection to the endpoint, say. Its ctx ends at ConnectTimeout (or
	// the exchange's deadline, if sooner); its error fails the exchange
	// as a *ConnectError.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// DefaultMaxResponseHeaderBytes is the response head cap when
// ClientConfig sets none: what the proxy takes from clients by default
// too, above what real responses need (nginx's default buffer is 4 or 8
// KiB, Envoy's cap 60 KiB), and small enough that an endpoint cannot make
// the proxy hold much (net/http's default of 10 MiB can).
const DefaultMaxResponseHeaderBytes = 64 << 10

// ErrResponseHeaderTooLarge is the error of an exchange whose response
// head ran past ClientConfig.MaxResponseHeaderBytes: the endpoint's fault.
var ErrResponseHeaderTooLarge = errors.New("upstream response header too large")

// Client speaks HTTP/1.1 to upstream endpoints over pooled keep-alive
// connections. Unlike net/http.Transport it runs the whole exchange on the
// caller's goroutine (no per-connection read and write loops, no channel
// hand-offs), which is what makes the proxy's hot path cheap; see
// docs/BENCHMARKS.md for the measurement that chose it.
type Client struct {
	cfg     ClientConfig
	maxHead int64

	mu    sync.Mutex
	pools map[string]*connPool
	// poolsRO is an immutable copy of pools read without the lock.
	poolsRO atomic.Pointer[map[string]*connPool]
	closed  bool
}

// NewClient returns a client with no connections.
func NewClient(cfg ClientConfig) *Client {
	c := &Client{cfg: cfg, maxHead: cfg.MaxResponseHeaderBytes, pools: map[string]*connPool{}}
	if c.maxHead <= 0 {
		c.maxHead = DefaultMaxResponseHeaderBytes
	}
	c.poolsRO.Store(&map[string]*connPool{})
	return c
}

// ConnectError marks a failure to establish a connection: nothing was
// sent, so retrying elsewhere is always safe.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return "connect: " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// ErrHeaderTimeout is returned when the upstream sent no response header in
// time; ErrRequestTimeout when the request's whole deadline ran out. Both
// are net.Errors whose Timeout is true.
var (
	ErrHeaderTimeout  error = timeoutError("upstream response header timeout")
	ErrRequestTimeout error = timeoutError("request timeout")
)

type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// connPool holds one endpoint's idle connections, most recently used first.
type connPool struct {
	addr string
	mu   sync.Mutex
	idle []*pconn
	// open counts connections that exist (idle or in use); idleN mirrors
	// len(idle) for lock-free metrics reads.
	open   atomic.Int64
	idleN  atomic.Int64
	dials  atomic.Uint64
	closed bool
}

type pconn struct {
	pool   *connPool
	conn   net.Conn
	hr     headReader // under br
	rec    []byte     // a response head too long for br's buffer, as read
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	reused bool
	// abort cuts the connection's I/O short; built once per connection so
	// that watching a request's context allocates less.
	abort func()
	// rc is conn's raw connection, taken once (SyscallConn allocates), and
	// peek the function alive hands it, built once too (a closure made
	// per call would be allocated per call): it reports through peekOK.
	// rcErr: conn is a syscall.Conn whose SyscallConn failed.
	rc      syscall.RawConn
	rcErr   bool
	peek    func(fd uintptr) bool
	peekOK  bool
	peekBuf [1]byte
}

func (c *Client) pool(addr string) *connPool {
	if p := (*c.poolsRO.Load())[addr]; p != nil {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[addr]
	if p == nil {
		p = &connPool{addr: addr}
		if c.closed {
			p.closed = true
		}
		c.pools[addr] = p
		ro := make(map[string]*connPool, len(c.pools))
		for k, v := range c.pools {
			ro[k] = v
		}
		c.poolsRO.Store(&ro)
	}
	return p
}

// Forget closes the idle connections of endpoints that are gone.
func (c *Client) Forget(addrs []string) {
	c.mu.Lock()
	var gone []*connPool
	for _, a := range addrs {
		if p := c.pools[a]; p != nil {
			gone = append(gone, p)
			delete(c.pools, a)
		}
	}
	ro := make(map[string]*connPool, len(c.pools))
	for k, v := range c.pools {
		ro[k] = v
	}
	c.poolsRO.Store(&ro)
	c.mu.Unlock()
	for _, p := range gone {
		p.close()
	}
}

// Close closes every idle connection; connections in use are closed when
// their exchange ends.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	pools := make([]*connPool, 0, len(c.pools))
	for _, p := range c.pools {
		pools = append(pools, p)
	}
	c.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// Stats returns the open and idle connection counts per endpoint address.
func (c *Client) Stats() map[string][2]int64 {
	m := map[string][2]int64{}
	for a, p := range *c.poolsRO.Load() {
		m[a] = [2]int64{p.open.Load(), p.idleN.Load()}
	}
	return m
}

func (p *connPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.idleN.Store(0)
	p.mu.Unlock()
	for _, pc := range idle {
		pc.closeConn()
	}
}

func (p *connPool) get(now time.Time, maxAge time.Duration) *pconn {
	p.mu.Lock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		pc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.idleN.Add(-1)
		if maxAge > 0 && now.Sub(pc.idleAt) > maxAge {
			p.mu.Unlock()
			pc.closeConn()
			p.mu.Lock()
			continue
		}
		p.mu.Unlock()
		return pc
	}
	p.mu.Unlock()
	return nil
}

// put returns a connection whose exchange ended cleanly. It reports false
// (and closes the connection) when the pool is full or closed.
func (p *connPool) put(pc *pconn, max int) {
	pc.idleAt = time.Now()
	pc.reused = true
	p.mu.Lock()
	if p.closed || len(p.idle) >= max {
		p.mu.Unlock()
		pc.closeConn()
		return
	}
	p.idle = append(p.idle, pc)
	p.idleN.Add(1)
	p.mu.Unlock()
}

var (
	brPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	bwPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

func (pc *pconn) closeConn() {
	pc.conn.Close()
	pc.pool.open.Add(-1)
	if pc.br != nil {
		pc.br.Reset(nil)
		brPool.Put(pc.br)
		pc.br = nil
	}
	if pc.bw != nil {
		pc.bw.Reset(nil)
		bwPool.Put(pc.bw)
		pc.bw = nil
	}
}

// alive reports whether an idle connection is still open and has nothing
// unread: a peer that closed it, or sent bytes nobody asked for, makes it
// unusable.
func (pc *pconn) alive() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if pc.rcErr {
		return false
	}
	if pc.rc == nil {
		return true
	}
	pc.peekOK = false
	pc.rc.Read(pc.peek)
	return pc.peekOK
}

// takeRawConn records conn's raw connection for alive.
func (pc *pconn) takeRawConn() {
	conn := pc.conn
	// A TLS connection is peeked at on its socket: a peer that closed it
	// or sent anything (an alert) while it was idle makes it unusable all
	// the same.
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		pc.rcErr = true
		return
	}
	pc.rc = rc
	pc.peek = pc.peekFD
}

func (c *Client) dial(ctx context.Context, p *connPool, deadline time.Time) (*pconn, error) {
	var conn net.Conn
	var err error
	if c.cfg.Dial != nil {
		conn, err = c.customDial(ctx, p.addr, deadline)
	} else {
		d := net.Dialer{Timeout: c.cfg.ConnectTimeout, Deadline: deadline, KeepAlive: 30 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return nil, &ConnectError{err}
	}
	p.dials.Add(1)
	p.open.Add(1)
	pc := &pconn{pool: p, conn: conn, abort: func() { conn.SetDeadline(aLongTimeAgo) }}
	pc.hr = headReader{r: conn, n: noLimit}
	pc.br = brPool.Get().(*bufio.Reader)
	pc.br.Reset(&pc.hr)
	pc.bw = bwPool.Get().(*bufio.Writer)
	pc.bw.Reset(conn)
	pc.takeRawConn()
	return pc, nil
}

// customDial opens a connection with ClientConfig.Dial, under the
// connect timeout and deadline.
func (c *Client) customDial(ctx context.Context, addr string, deadline time.Time) (net.Conn, error) {
	if c.cfg.ConnectTimeout > 0 {
		if d := time.Now().Add(c.cfg.ConnectTimeout); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return c.cfg.Dial(ctx, addr)
}

const noLimit = 1<<63 - 1

// aLongTimeAgo is a deadline in the past: setting it unblocks any I/O.
var aLongTimeAgo = time.Unix(1, 0)

// Do sends out to the endpoint at addr and returns its response. ctx is the
// client's: when it ends (the client went away) the exchange is cut short.
// deadline, when not zero, bounds the whole exchange including the body.
// The response body (a *Body) must be closed; reading it to EOF first
// returns the connection to the pool. A *ConnectError means nothing
// reached the endpoint; a *BodyError that reading out.Body failed.
//
// A request on a reused connection that fails before any response byte
// (the endpoint closed an idle connection as we picked it) is retried once
// on a fresh connection when it can be sent again, as net/http does. One
// that got any part of an answer is not: the endpoint has seen it.
func (c *Client) Do(ctx context.Context, deadline time.Time, addr string, out Request) (*http.Response, error) {
	p := c.pool(addr)
	now := time.Now()
	pc := p.get(now, c.cfg.IdleTimeout)
	// Look at a reused connection before using it (one non-blocking peek):
	// one the endpoint closed is useless, and one with unread bytes — an
	// answer nobody asked for, or the tail of a body longer than its
	// Content-Length — would hand those bytes to this request as its
	// response (net/http's "unsolicited response on idle HTTP channel").
	for pc != nil && !pc.alive() {
		pc.closeConn()
		pc = p.get(now, c.cfg.IdleTimeout)
	}
	if pc == nil {
		var err error
		if pc, err = c.dial(ctx, p, deadline); err != nil {
			return nil, err
		}
		now = time.Time{} // the dial took time: read the clock again
	}
	resp, stop, err := c.exchange(ctx, deadline, now, pc, &out)
	if err != nil && pc.reused && pc.hr.n == c.maxHead && out.replayable() && !isTimeout(err) && ctx.Err() == nil {
		if pc, err = c.dial(ctx, p, deadline); err != nil {
			return nil, err
		}
		resp, stop, err = c.exchange(ctx, deadline, time.Time{}, pc, &out)
	}
	if err != nil {
		return nil, err
	}
	b := out.BodyStore
	if b == nil {
		b = new(Body)
	}
	*b = Body{rc: resp.Body, pc: pc, c: c, stop: stop, close: resp.Close}
	resp.Body = b
	return resp, nil
}

// exchange writes the request and reads the response header on pc. On error
// pc is closed. now is the time, read just before (zero: read it).
func (c *Client) exchange(ctx context.Context, deadline, now time.Time, pc *pconn, out *Request) (*http.Response, func() bool, error) {
	// A cancelled client context unblocks whatever I/O the exchange or the
	// body copy is doing. A context that can never end (the HTTP/1 server's
	// requests carry none of their own) needs no watcher, and is spared
	// the two allocations of registering one.
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, pc.abort)
	}
	resp, err := c.exchange1(ctx, deadline, now, pc, out)
	if err != nil {
		if stop != nil {
			stop()
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, err
	}
	return resp, stop, nil
}

// headerDeadline is when the response header must have come, counted from
// now (zero: the clock is read): the response-header timeout (none when it
// is 0), capped by the request's own deadline (none when zero).
func (c *Client) headerDeadline(now, deadline time.Time) time.Time {
	if c.cfg.ResponseHeaderTimeout <= 0 {
		return deadline
	}
	if now.IsZero() {
		now = time.Now()
	}
	d := now.Add(c.cfg.ResponseHeaderTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		return deadline
	}
	return d
}

// exchange1 does the I/O of one exchange. Deadlines: the response-header
// timeout starts once the request is sent and is capped by the request's
// own deadline, which then bounds the body. A request without a body is
// sent and answered under one deadline, set once; its response-header
// timeout is counted from now, the clock reading Do took before it looked
// at the pooled connection (zero after a dial: read afresh).
func (c *Client) exchange1(ctx context.Context, deadline, now time.Time, pc *pconn, out *Request) (*http.Response, error) {
	// The head cap counts every head read, 1xx ones included; set before
	// the request goes, it also tells Do whether any answer came.
	pc.hr.n = c.maxHead
	hdrDeadline := c.headerDeadline(now, deadline)
	if out.Body == nil {
		pc.conn.SetDeadline(hdrDeadline)
	} else {
		pc.conn.SetWriteDeadline(deadline)
	}
	if err := out.write(pc.bw); err != nil {
		pc.closeConn()
		return nil, fmt.Errorf("write request: %w", err)
	}
	if out.Body != nil {
		hdrDeadline = c.headerDeadline(time.Time{}, deadline) // after the body went
		pc.conn.SetReadDeadline(hdrDeadline)
	}
	// A cancellation that came before a deadline was set must win over it.
	if ctx.Err() != nil {
		pc.abort()
	}
	resp, err := pc.readResponse(out.Req)
	// 1xx informational responses other than 101 are skipped: the final
	// response follows on the same connection.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = pc.readResponse(out.Req)
	}
	if errors.Is(err, ErrResponseHeaderTooLarge) {
		err = fmt.Errorf("%w (over %d bytes)", err, c.maxHead)
	}
	if err == nil && resp.StatusCode < 100 {
		resp.Body.Close()
		err = fmt.Errorf("read response: malformed status code %d", resp.StatusCode)
	}
	if err != nil {
		pc.closeConn()
		if isTimeout(err) {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return nil, ErrRequestTimeout
			}
			return nil, ErrHeaderTimeout
		}
		return nil, fmt.Errorf("read response: %w", err)
	}
	pc.hr.n = noLimit // the body is not capped
	// The body is read under the request's deadline (none if zero). When
	// the whole body is already buffered no read reaches the connection, so
	// the deadline is left alone: every exchange sets its own before any
	// I/O, and so does the tunnel of a protocol switch.
	buffered := resp.ContentLength == 0 || resp.Body == http.NoBody ||
		(resp.ContentLength > 0 && int64(pc.br.Buffered()) >= resp.ContentLength)
	if hdrDeadline != deadline && !buffered {
		pc.conn.SetReadDeadline(deadline)
		if ctx.Err() != nil {
			pc.abort()
		}
	}
	return resp, nil
}

// readResponse reads one response head: with parseResponseHead when the
// head fits in br's buffer and is one it takes (no Connection: close among
// its rules), else with http.ReadResponse. That drops
// the Connection field of a response that says close (HTTP/1.1), but the
// fields it names are hop-by-hop all the same: readResponse puts it back,
// as the endpoint sent it, so that the caller can remove them. To that end
// the raw head is looked at before it is parsed (rawHead); it is copied
// only when its Connection field names more than close and keep-alive.
func (pc *pconn) readResponse(req *http.Request) (*http.Response, error) {
	var raw []byte
	head := rawHead(pc.br, &pc.hr, &pc.rec)
	if head != nil {
		if resp, ok := parseResponseHead(head, req, pc.br, nil); ok {
			pc.br.Discard(len(head))
			return resp, nil
		}
	}
	if head != nil && namesFields(head) {
		raw = bytes.Clone(head)
	}
	resp, err := http.ReadResponse(pc.br, req)
	if head == nil {
		// A head longer than br's buffer: it was recorded as it was read.
		pc.hr.rec = nil
		switch {
		case err == nil:
			raw = pc.rec[:len(pc.rec)-pc.br.Buffered()]
		case pc.hr.n <= 0:
			// The parser failed for want of the bytes past the cap. (A head
			// that was whole in the buffer failed for a reason of its own.)
			err = ErrResponseHeaderTooLarge
		}
	}
	if err == nil && raw != nil && resp.Close && resp.Header["Connection"] == nil {
		if v := connectionField(raw); v != nil {
			resp.Header["Connection"] = v
		}
	}
	pc.rec = nil // rare; not worth keeping per connection
	return resp, err
}

// namesFields reports whether a response head has a Connection field that
// may name other fields: a token other than close and keep-alive, or a
// continuation line (obs-fold) after it.
func namesFields(head []byte) bool {
	names, inConn := false, false
	eachField(head, func(line []byte) {
		name := fieldName(line)
		switch {
		case names:
		case name == nil:
			names = inConn // a continuation of Connection, or a line the parser refuses
		case asciiEqualFold(name, "Connection"):
			inConn = true
			for v := line[len(name)+1:]; len(v) > 0; {
				tok, rest, _ := bytes.Cut(v, []byte{','})
				tok, v = bytes.Trim(tok, " \t"), rest
				if len(tok) > 0 && !asciiEqualFold(tok, "close") && !asciiEqualFold(tok, "keep-alive") {
					names = true
				}
			}
		default:
			inConn = false
		}
	})
	return names
}

// connectionField returns the Connection field of a response head as
// net/textproto reads it (the parser http.ReadResponse uses), nil if none.
func connectionField(head []byte) []string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil
	}
	return h["Connection"]
}

// Request is a request as it goes upstream. Its header has had the
// hop-by-hop fields removed and the forwarding fields added.
type Request struct {
	// Req gives the method, and is what the response parser is told the
	// response answers (http.ReadResponse).
	Req *http.Request
	// URI is the request target; Host the Host header.
	URI, Host string
	Header    http.Header
	// Body is nil for none; Length is its length (-1: unknown, sent
	// chunked).
	Body   io.Reader
	Length int64
	// Upgrade is the Upgrade header value for a protocol switch
	// (WebSocket); "" otherwise.
	Upgrade string
	// BodyStore, when not nil, is where Do puts the response's Body
	// instead of allocating one: the caller's per-request state can hold
	// it, so that an exchange costs no allocation of its own. It is
	// overwritten, and must not be given to another exchange while the
	// response it ends up in is in use (one per request, for its first
	// exchange, is the safe use).
	BodyStore *Body
}

// replayable reports whether the request may be sent again after a reused
// connection failed: it has no body and is idempotent (RFC 9110 9.2.2) or
// carries an Idempotency-Key.
func (o *Request) replayable() bool {
	if o.Body != nil || o.Upgrade != "" {
		return false
	}
	switch o.Req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return o.Header.Get("Idempotency-Key") != ""
}

func (o *Request) write(bw *bufio.Writer) error {
	bw.WriteString(o.Req.Method)
	bw.WriteByte(' ')
	bw.WriteString(o.URI)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(o.Host)
	bw.WriteString("\r\n")
	for k, vv := range o.Header {
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeHeaderValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
	if o.Upgrade != "" {
		bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
		bw.WriteString(o.Upgrade)
		bw.WriteString("\r\n")
	}
	switch {
	case o.Body == nil:
		if methodWantsLength(o.Req.Method) {
			bw.WriteString("Content-Length: 0\r\n")
		}
		bw.WriteString("\r\n")
		return bw.Flush()
	case o.Length >= 0:
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), o.Length, 10))
		bw.WriteString("\r\n\r\n")
		if err := copyFlushing(bw, bw, o.Body, o.Length); err != nil {
			return err
		}
		return bw.Flush()
	default:
		bw.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		cw := httputil.NewChunkedWriter(bw)
		if err := copyFlushing(cw, bw, o.Body, -1); err != nil {
			return err
		}
		if err := cw.Close(); err != nil {
			return err
		}
		bw.WriteString("\r\n")
		return bw.Flush()
	}
}

// copyFlushing copies a request body to dst (bw, or a chunked writer over
// it), flushing bw after every read so that a streaming or slow upload
// reaches the endpoint as it arrives: holding it back would leave the
// connection silent, and the endpoint free to close it as idle. length is
// the body's length, or -1 to copy to EOF. A failure to read src (or a
// body shorter than length) is a *BodyError, the client's fault; a failure
// to write is returned as it is: the connection broke.
func copyFlushing(dst io.Writer, bw *bufio.Writer, src io.Reader, length int64) error {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	for length != 0 {
		buf := *bp
		if length > 0 && length < int64(len(buf)) {
			buf = buf[:length]
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			if length > 0 {
				length -= int64(n)
			}
		}
		switch {
		case rerr == io.EOF && length > 0:
			return &BodyError{io.ErrUnexpectedEOF}
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return &BodyError{rerr}
		}
	}
	return nil
}

// BodyError is a failure to read the request's body (the client's fault,
// not the endpoint's).
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "read request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

func methodWantsLength(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

// copyBufPool holds the 32 KiB buffers of body copies.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

// GetBuffer returns a 32 KiB copy buffer; PutBuffer gives it back.
func GetBuffer() *[]byte { return copyBufPool.Get().(*[]byte) }

// PutBuffer returns a buffer from GetBuffer.
func PutBuffer(b *[]byte) { copyBufPool.Put(b) }

// Body is the body of a response from Client.Do. Reading it to EOF hands
// the connection back to the pool; closing it early closes the connection.
type Body struct {
	rc    io.ReadCloser
	pc    *pconn
	c     *Client
	stop  func() bool // stops the context watcher
	eof   bool
	close bool // the response said Connection: close
	done  bool
}

func (b *Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *Body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// The watcher must be stopped before the connection can be reused: a
	// watcher that already fired has poisoned the connection's deadline.
	stopped := b.stop == nil || b.stop()
	// Bytes past the end of the response mean the endpoint and we disagree
	// on framing: the connection cannot carry another exchange.
	if b.eof && !b.close && stopped && b.pc.br.Buffered() == 0 {
		b.rc.Close()
		b.pc.pool.put(b.pc, b.c.cfg.MaxIdlePerEndpoint)
		return nil
	}
	b.pc.closeConn()
	return nil
}

// Detach takes the connection out of the client for a protocol switch
// (101 Switching Protocols): the exchange's deadline and cancellation end,
// and the caller reads and writes the connection itself, starting with
// what br has buffered. Closing the body closes the connection.
func (b *Body) Detach() (conn net.Conn, br *bufio.Reader) {
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
	b.close = true
	b.pc.conn.SetDeadline(time.Time{})
	return b.pc.conn, b.pc.br
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// RequestURI is the request target to send upstream for r. The client's
// own target goes as it came unless it holds a byte that could end the
// request line early (HTTP/2's :path may carry spaces): then the parsed
// URL's escaped form goes instead, with any such byte of its query (which
// the URL keeps as it came) percent-encoded.
func RequestURI(r *http.Request) string {
	if u := r.RequestURI; u != "" && (u[0] == '/' || u == "*") && safeTarget(u) {
		return u
	}
	u := r.URL.RequestURI()
	if safeTarget(u) {
		return u
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(u)+8)
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c == 0x7f {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func safeTarget(u string) bool {
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
