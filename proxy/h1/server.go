package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves HTTP/1.x: on the connections of a listener (Serve), or on
// connections accepted elsewhere (ServeConn), such as TLS connections
// whose handshake chose HTTP/1.1. It parses the common request head
// itself, and every other with the standard library's parser
// (http.ReadRequest: the same code, and so the same request-smuggling
// defences, as net/http's server), of which its own is a strict subset
// (see the package doc). It adds the checks net/http's server makes on
// top of the parser (Host, header field syntax, version, Expect), and
// refuses the framing net/http tolerates (Content-Length with
// Transfer-Encoding, Transfer-Encoding on HTTP/1.0). It differs from
// net/http.Server in what it leaves out on the hot path: no background
// read and no context per request, no header copy per response, one
// response writer per connection. The price: a client that goes away while
// its request waits for the upstream is noticed when the response is
// written (or at the route's timeout), not at once, as with HAProxy's
// default. It does not speak HTTP/2, nor TLS: a TLS listener completes
// the handshake itself and hands the connection over.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout, IdleTimeout, ReadBodyTimeout and MaxHeaderBytes
	// are the limits the server starts with (see Settings); SetSettings
	// changes them later.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	ReadBodyTimeout   time.Duration
	MaxHeaderBytes    int
	Log               *slog.Logger

	settings atomic.Pointer[Settings] // nil until first read or set
	h2c      atomic.Pointer[func(net.Conn)]
	mu       sync.Mutex
	conns    map[*conn]struct{}
	lis      []net.Listener
	shutdown atomic.Bool
	active   sync.WaitGroup
}

// Settings are the limits a Server holds its connections to.
type Settings struct {
	// ReadHeaderTimeout bounds reading a request's header, and the wait
	// for a new connection's first request (0: none).
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for a keep-alive connection's next
	// request (0: none).
	IdleTimeout time.Duration
	// ReadBodyTimeout bounds each read of a request body: the longest the
	// client may go without sending any of it. A read that times out
	// fails with a net.Error whose Timeout is true, and the connection
	// closes after the answer. 0: IdleTimeout.
	ReadBodyTimeout time.Duration
	// MaxHeaderBytes caps the request line and header.
	MaxHeaderBytes int
}

// SetSettings changes the server's limits while it serves. Each connection
// reads them before it waits for its next request, so they reach every
// live keep-alive connection without closing it; a wait already under way
// keeps the deadline it started with. It is safe to call concurrently with
// Serve.
func (s *Server) SetSettings(st Settings) { s.settings.Store(&st) }

// SetPriorKnowledge hands fn the connections that open with HTTP/2's
// connection preface, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n": clients that
// speak cleartext HTTP/2 with prior knowledge (h2c), as gRPC clients do.
// fn gets the connection with the bytes the server read from it put back
// in front, preface first, and owns it from then on (Shutdown and Close
// no longer see it). The test costs nothing on other connections: it
// looks at the first request's first bytes, which are read anyway. nil,
// the default, turns it off: such a connection is then refused as an
// HTTP/1 request of an unsupported version. Safe to call while serving;
// it applies to connections whose first request has not come yet.
func (s *Server) SetPriorKnowledge(fn func(net.Conn)) {
	if fn == nil {
		s.h2c.Store(nil)
		return
	}
	s.h2c.Store(&fn)
}

// current returns the server's limits: the last SetSettings, or those it
// was made with.
func (s *Server) current() *Settings {
	if st := s.settings.Load(); st != nil {
		return st
	}
	s.settings.CompareAndSwap(nil, &Settings{
		ReadHeaderTimeout: s.ReadHeaderTimeout, IdleTimeout: s.IdleTimeout,
		ReadBodyTimeout: s.ReadBodyTimeout, MaxHeaderBytes: s.MaxHeaderBytes,
	})
	return s.settings.Load()
}

// errServerClosed mirrors http.ErrServerClosed for callers that treat both
// servers alike.
var errServerClosed = http.ErrServerClosed

// Serve accepts connections on l and serves each on a goroutine of its
// own, until Shutdown or Close (http.ErrServerClosed) or until l fails.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.shutdown.Load() {
		s.mu.Unlock()
		return errServerClosed
	}
	s.lis = append(s.lis, l)
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.shutdown.Load() || errors.Is(err, net.ErrClosed) {
				return errServerClosed
			}
			return err
		}
		c := s.track(nc)
		if c == nil {
			return errServerClosed
		}
		go c.serve()
	}
}

// ServeConn serves nc, a connection accepted elsewhere, and returns when
// it is closed or a handler took it over (Hijack). Shutdown and Close
// treat it as one of Serve's; once they are called, ServeConn closes nc
// at once. When nc has a ConnectionState method, as a *tls.Conn has, the
// state is taken once and every request read from nc carries it in its
// TLS field.
func (s *Server) ServeConn(nc net.Conn) {
	if c := s.track(nc); c != nil {
		c.serve()
	}
}

// track makes nc one of the server's connections, or closes it and
// returns nil when the server is shut down.
func (s *Server) track(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		nc.Close()
		return nil
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	c := &conn{s: s, nc: nc}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	return c
}

// Shutdown stops accepting, closes idle connections, and waits for the
// others to finish their request, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown.Store(true)
	for _, l := range s.lis {
		l.Close()
	}
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutdown.Store(true)
	for _, l := range s.lis {
		l.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.active.Done()
}

// Connection states.
const (
	connIdle   = 0 // waiting for a request
	connActive = 1 // reading or serving one
	connClosed = 2
)

type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	tls    *tls.ConnectionState // nc's, shared by its requests; nil for cleartext
	lr     headReader           // caps what the header parser may read
	rec    []byte               // a request head too long for br's buffer, as read
	br     *bufio.Reader
	bw     *bufio.Writer
	state  atomic.Int32
	w      response
	// staleDeadline: a read deadline set for an earlier purpose (an idle
	// wait, a header read) may still be in force. It is left there after
	// a request without a body, which reads nothing more, and cleared (or
	// replaced) only before the connection is read again.
	staleDeadline bool
}

// closeIfIdle closes the connection when it is between requests.
func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(connIdle, connClosed) {
		// Unblocks the read waiting for the next request.
		c.nc.SetReadDeadline(aLongTimeAgo)
	}
}

const maxPostHandlerDrain = 256 << 10

var (
	srvBRPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	srvBWPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

func (c *conn) serve() {
	hijacked, handedOff := false, false
	defer func() {
		if !hijacked {
			if !handedOff {
				c.nc.Close()
			}
			if c.br != nil {
				c.br.Reset(nil)
				srvBRPool.Put(c.br)
				c.bw.Reset(nil)
				srvBWPool.Put(c.bw)
			}
			c.s.forget(c)
		}
	}()
	c.remote = c.nc.RemoteAddr().String()
	if cs, ok := c.nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		// Once per connection, as net/http does: the state does not
		// change after the handshake.
		st := cs.ConnectionState()
		c.tls = &st
	}
	c.lr.r = c.nc
	c.br = srvBRPool.Get().(*bufio.Reader)
	c.br.Reset(&c.lr)
	c.bw = srvBWPool.Get().(*bufio.Writer)
	c.bw.Reset(c.nc)
	c.w.header = http.Header{}
	for first := true; ; first = false {
		// The limits are read afresh for every request, so that new
		// settings reach live connections: the wait for the request runs
		// under those current when it began, the request itself under
		// those current when it came.
		st := c.s.current()
		c.lr.n = headerLimit(st)
		if !c.awaitRequest(first, st) {
			return
		}
		if first {
			if fn := c.s.h2c.Load(); fn != nil && c.priorKnowledge() {
				nc := &replayConn{Conn: c.nc}
				nc.buf, _ = c.br.Peek(c.br.Buffered())
				nc.buf = bytes.Clone(nc.buf)
				c.nc.SetReadDeadline(time.Time{})
				handedOff = true
				(*fn)(nc)
				return
			}
		}
		if now := c.s.current(); now != st {
			st = now
			c.lr.n = headerLimit(st) - int64(c.br.Buffered())
		}
		// A head that is wholly buffered is parsed without a read, so no
		// header deadline is needed (the common case: one setting of the
		// connection's deadline, and one reading of the clock, saved).
		if !c.headBuffered() {
			if st.ReadHeaderTimeout > 0 {
				c.nc.SetReadDeadline(time.Now().Add(st.ReadHeaderTimeout))
			} else if c.staleDeadline {
				c.nc.SetReadDeadline(time.Time{})
			}
			c.staleDeadline = false
		}
		req, fr, err := c.readRequest()
		if err != nil {
			c.badRequest(err)
			return
		}
		c.lr.n = 1<<63 - 1
		if msg := fr.ambiguous(req); msg != "" {
			c.reject(http.StatusBadRequest, msg)
			return
		}
		if code, msg := c.check(req); code != 0 {
			c.reject(code, msg)
			return
		}
		// Each read of the body may wait up to the body timeout for the
		// client's next bytes (nginx's client_body_timeout). A request
		// without a body reads nothing more from the connection: the
		// deadline in force stays until the next wait replaces it.
		if req.Body != http.NoBody {
			c.nc.SetReadDeadline(time.Time{})
			c.staleDeadline = false
			if d := st.bodyTimeout(); d > 0 {
				req.Body = &timedBody{ReadCloser: req.Body, c: c.nc, idle: d}
			}
		} else {
			c.staleDeadline = true
		}
		req.RemoteAddr = c.remote
		req.TLS = c.tls
		keep, hj := c.serveOne(req)
		if hj {
			hijacked = true
			return
		}
		if !keep {
			return
		}
	}
}

// http2Preface opens every HTTP/2 connection (RFC 9113 3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// priorKnowledge reports whether the connection opens with HTTP/2's
// preface. It reads only while what came so far is a prefix of it: an
// HTTP/1 request differs by its second byte at the latest (POST, PUT,
// PATCH), so it never waits for bytes an HTTP/1 client does not send.
func (c *conn) priorKnowledge() bool {
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		n := min(len(b), len(http2Preface))
		if string(b[:n]) != http2Preface[:n] {
			return false
		}
		if n == len(http2Preface) {
			return true
		}
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			return false
		}
	}
}

// replayConn is a connection handed on by SetPriorKnowledge: the bytes
// the server had read from it come first.
type replayConn struct {
	net.Conn
	buf []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// bodyTimeout is the bound on each read of a request body.
func (st *Settings) bodyTimeout() time.Duration {
	if st.ReadBodyTimeout > 0 {
		return st.ReadBodyTimeout
	}
	return st.IdleTimeout
}

// headerLimit is how much the header parser may read under st.
func headerLimit(st *Settings) int64 {
	return int64(st.MaxHeaderBytes) + 4096 // net/http's allowance for bufio's read-ahead
}

// headBuffered reports whether br holds the whole head of the next
// request, so that parsing it reads nothing from the connection.
func (c *conn) headBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return headEnd(b) >= 0
}

// awaitRequest waits between requests for the next one's first byte. It
// reports false when the connection is to be closed: it went quiet past
// its timeout, the client closed it, the header limit ran out, or
// Shutdown closed it as idle. The wait is the idle timeout, except before
// the first request of a connection, which gets the read-header timeout as
// with net/http. The deadline is set before the connection is marked idle,
// so that Shutdown's closing deadline always comes after it and wins.
func (c *conn) awaitRequest(first bool, st *Settings) bool {
	s := c.s
	if c.br.Buffered() > 0 {
		c.state.Store(connActive) // pipelined: the next request is here
		return true
	}
	wait := st.IdleTimeout
	if first && st.ReadHeaderTimeout > 0 {
		wait = st.ReadHeaderTimeout
	}
	if wait > 0 {
		c.nc.SetReadDeadline(time.Now().Add(wait))
	} else if c.staleDeadline {
		c.nc.SetReadDeadline(time.Time{})
	}
	c.staleDeadline = false
	if !c.state.CompareAndSwap(connActive, connIdle) && c.state.Load() != connIdle {
		return false
	}
	if s.shutdown.Load() {
		return false
	}
	if _, err := c.br.Peek(1); err != nil {
		if c.lr.n <= 0 {
			c.badRequest(err)
		}
		return false
	}
	return c.state.CompareAndSwap(connIdle, connActive) // false: closed as idle by Shutdown
}

// readRequest parses the next request, and reports the framing fields
// its head carried as sent: with parseRequestHead when the head fits in
// br's buffer and is one it takes, else with http.ReadRequest.
func (c *conn) readRequest() (*http.Request, framing, error) {
	var fr framing
	head := rawHead(c.br, &c.lr, &c.rec)
	if head != nil {
		if req, fr, ok := parseRequestHead(head, c.br, nil); ok {
			c.br.Discard(len(head))
			return req, fr, nil
		}
		fr = framingOf(head)
		req, err := http.ReadRequest(c.br)
		return req, fr, err
	}
	// A head longer than br's buffer: it was recorded as it was read.
	req, err := http.ReadRequest(c.br)
	c.lr.rec = nil
	if err == nil {
		fr = framingOf(c.rec[:len(c.rec)-c.br.Buffered()])
	}
	c.rec = nil // rare; not worth keeping per connection
	return req, fr, err
}

// framing says which framing fields a request head carried, as sent:
// http.ReadRequest drops Content-Length when Transfer-Encoding is chunked,
// ignores (and drops) Transfer-Encoding on HTTP/1.0, and drops Host (an
// absolute-form target then stands in for a Host field that was never
// sent).
type framing struct {
	contentLength, transferEncoding, host bool
	// badHost: a Host field's value is not a valid host (net/http
	// refuses it even when an absolute-form target names another).
	badHost bool
}

func framingOf(head []byte) (fr framing) {
	inHost := false // the line before was (part of) a Host field
	eachField(head, func(line []byte) {
		name := fieldName(line)
		if name == nil {
			// A continuation (obs-fold): folded into a Host value it adds
			// a space, which no valid host has, as net/http finds too.
			fr.badHost = fr.badHost || inHost
			return
		}
		inHost = false
		switch len(name) {
		case len("Content-Length"):
			fr.contentLength = fr.contentLength || asciiEqualFold(name, "Content-Length")
		case len("Transfer-Encoding"):
			fr.transferEncoding = fr.transferEncoding || asciiEqualFold(name, "Transfer-Encoding")
		case len("Host"):
			if asciiEqualFold(name, "Host") {
				fr.host, inHost = true, true
				v := bytes.TrimSpace(line[len(name)+1:])
				fr.badHost = fr.badHost || !httpguts.ValidHostHeader(string(v))
			}
		}
	})
	return fr
}

// ambiguous returns why req's framing cannot be trusted, or "". A request
// with both Content-Length and Transfer-Encoding, or with
// Transfer-Encoding on HTTP/1.0 (RFC 9112 6.1, 6.3), is read one way here
// and may be read another way by a server before or after this one: the
// request-smuggling pattern. net/http serves both; like nginx, the server
// refuses them, and the connection closes, so nothing that follows on it
// is read as a request.
func (fr framing) ambiguous(req *http.Request) string {
	switch {
	case !fr.host && req.ProtoMajor == 1 && req.ProtoMinor >= 1:
		// RFC 9112 3.2: a server answers 400 to an HTTP/1.1 request
		// without a Host field, even one with an absolute-form target,
		// as net/http does.
		return "missing required Host header"
	case fr.badHost:
		return "malformed Host header"
	case !fr.transferEncoding:
		return ""
	case fr.contentLength:
		return "both Content-Length and Transfer-Encoding"
	case !req.ProtoAtLeast(1, 1):
		return "Transfer-Encoding in an HTTP/1.0 request"
	}
	return ""
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// timedBody renews the connection's read deadline before each read of a
// request body.
type timedBody struct {
	io.ReadCloser
	c    net.Conn
	idle time.Duration
}

func (b *timedBody) Read(p []byte) (int, error) {
	b.c.SetReadDeadline(time.Now().Add(b.idle))
	return b.ReadCloser.Read(p)
}

// check makes the checks net/http's server makes after parsing a request.
func (c *conn) check(req *http.Request) (int, string) {
	if req.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "unsupported protocol version"
	}
	// http.ReadRequest has refused duplicate Host headers, moved the Host
	// header into req.Host (or taken the host of an absolute request
	// target) and dropped the header. The proxy routes on req.Host and
	// sends exactly that one Host upstream.
	switch {
	case req.Host == "" && req.ProtoAtLeast(1, 1):
		return http.StatusBadRequest, "missing required Host header"
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return http.StatusBadRequest, "malformed Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return http.StatusBadRequest, "invalid header value"
			}
		}
	}
	if req.Method == http.MethodConnect {
		return http.StatusMethodNotAllowed, "CONNECT is not supported"
	}
	if ex, ok := req.Header["Expect"]; ok {
		if len(ex) != 1 || !strings.EqualFold(ex[0], "100-continue") {
			return http.StatusExpectationFailed, "unsupported Expect"
		}
	}
	return 0, ""
}

// badRequest answers a request that could not be parsed, as net/http does,
// and the connection closes.
func (c *conn) badRequest(err error) {
	if c.lr.n <= 0 {
		c.reject(http.StatusRequestHeaderFieldsTooLarge, "request header too large")
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return // the client closed between requests
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return // read header timeout: just close
	}
	if strings.Contains(err.Error(), "unsupported transfer encoding") {
		c.reject(http.StatusNotImplemented, "unsupported transfer encoding")
		return
	}
	c.reject(http.StatusBadRequest, "malformed request")
}

func (c *conn) reject(code int, msg string) {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(msg), msg)
	c.bw.Flush()
	c.closeWriteAndWait()
}

// closeWriteAndWait half-closes the connection and reads what the client
// still sends for a moment, so that unread input does not make the kernel
// reset the connection before the client has read our last answer (as
// net/http does).
func (c *conn) closeWriteAndWait() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c.nc, 256<<10))
}

// serveOne runs the handler for one request. It reports whether the
// connection can carry another request, and whether the handler took the
// connection over.
func (c *conn) serveOne(req *http.Request) (keep, hijacked bool) {
	w := &c.w
	w.reset(c, req)
	var cr *continueReader
	if _, ok := req.Header["Expect"]; ok && req.Body != http.NoBody && req.ProtoAtLeast(1, 1) {
		cr = &continueReader{ReadCloser: req.Body, w: w}
		req.Body = cr
	}
	defer func() {
		if p := recover(); p != nil {
			keep = false
			if p != http.ErrAbortHandler {
				c.s.Log.Error("panic serving request", "remote", c.remote, "panic", fmt.Sprint(p))
			}
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	if w.hijacked {
		return false, true
	}
	// A client that waits for 100 Continue never got it: its body will not
	// come, so this connection cannot carry another request (net/http
	// closes too).
	if cr != nil && !cr.sent {
		w.closeAfter = true
	}
	if !w.finish() || w.closeAfter {
		if req.ContentLength != 0 && req.Body != http.NoBody {
			// The body may still be coming (an answer refused it by its
			// length): close as reject does, or the client's next write
			// brings a reset that can arrive before it read the answer.
			c.closeWriteAndWait()
		}
		return false, false
	}
	// Whatever of the request body the handler left unread must go before
	// the next request can be read; a large rest is cheaper to close on.
	if req.Body != nil && req.Body != http.NoBody {
		n, err := io.CopyN(io.Discard, req.Body, maxPostHandlerDrain+1)
		if n > maxPostHandlerDrain || (err != nil && err != io.EOF) {
			c.closeWriteAndWait()
			return false, false
		}
	}
	return true, false
}

// continueReader sends "100 Continue" before the first read of a body the
// client waits to send.
type continueReader struct {
	io.ReadCloser
	w    *response
	sent bool
}

func (r *continueReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		if !r.w.wroteHeader {
			r.w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := r.w.c.bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return r.ReadCloser.Read(p)
}

// response is the http.ResponseWriter of Server, one per connection,
// reset for each request.
//
// Framing: a response whose handler set Content-Length (a proxied response
// usually has) goes out as it is written. Without one, up to smallBody
// bytes are held back: a handler that finishes within them gets a
// Content-Length, as with net/http; a longer body, or a Flush, switches to
// chunked encoding (or, for HTTP/1.0, to ending the body by closing).
type response struct {
	c           *conn
	req         *http.Request
	header      http.Header
	wroteHeader bool // WriteHeader was called
	committed   bool // the header is on its way to the client
	status      int
	noBody      bool  // HEAD, 1xx, 204, 304
	chunked     bool  // body sent with chunked encoding
	length      int64 // declared Content-Length, -1 if none
	written     int64
	pending     []byte // held-back start of a body without Content-Length
	closeAfter  bool
	hijacked    bool
	failed      bool // a write to the client failed
}

const smallBody = 2048

func (w *response) reset(c *conn, req *http.Request) {
	h, pending := w.header, w.pending[:0]
	clear(h)
	*w = response{c: c, req: req, header: h, length: -1, pending: pending}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.hijacked {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return // informational responses are not relayed
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	w.noBody = w.req.Method == http.MethodHead || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	if cl := h["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			delete(h, "Content-Length")
		}
	} else if len(cl) > 1 {
		delete(h, "Content-Length")
	}
	if w.noBody || w.length >= 0 {
		w.commit(false)
	}
}

// commit writes the status line and header. chunked asks for chunked
// encoding when the length is unknown.
func (w *response) commit(chunked bool) {
	w.committed = true
	req, h, bw := w.req, w.header, w.c.bw
	delete(h, "Transfer-Encoding")
	if req.Close || w.c.s.shutdown.Load() || w.closeAfter {
		w.closeAfter = true
	}
	if v := h["Connection"]; len(v) > 0 {
		for _, x := range v {
			if strings.EqualFold(strings.TrimSpace(x), "close") {
				w.closeAfter = true
			}
		}
		delete(h, "Connection") // written below from closeAfter
	}
	if !w.noBody && w.length < 0 {
		if chunked && req.ProtoAtLeast(1, 1) {
			w.chunked = true
		} else {
			w.closeAfter = true // the close ends the body
		}
	}
	if _, ok := h["Trailer"]; ok && !w.chunked {
		delete(h, "Trailer")
	}
	bw.WriteString("HTTP/1.1 ")
	// Digits go straight into bw's free space: a local array handed to
	// bw.Write would escape to the heap.
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(w.status), 10))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(w.status))
	bw.WriteString("\r\n")
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			// A name that is not a token (an upstream's "Content-Length :"
			// kept by net/http's parser) is never written: RFC 9112 5.1
			// wants the space gone, and a lenient client could read it.
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeHeaderValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate())
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	switch {
	case w.closeAfter:
		bw.WriteString("Connection: close\r\n")
	case !req.ProtoAtLeast(1, 1):
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
}

// writeHeaderValue writes v with any CR or LF turned into a space, as
// net/http does, so that no value can end the header early.
func writeHeaderValue(bw *bufio.Writer, v string) {
	if strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
		bw.WriteString(v)
		return
	}
	bw.WriteString(strings.NewReplacer("\r", " ", "\n", " ").Replace(v))
}

func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.committed {
		if len(w.pending)+len(p) <= smallBody {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commit(true)
		if err := w.writeBody(w.pending); err != nil {
			return 0, err
		}
		w.pending = w.pending[:0]
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	if err := w.writeBody(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *response) writeBody(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	bw := w.c.bw
	if w.chunked {
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.failed = true
	}
	return err
}

// Flush sends what is buffered to the client.
func (w *response) Flush() {
	if w.hijacked {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
		w.writeBody(w.pending)
		w.pending = w.pending[:0]
	}
	if err := w.c.bw.Flush(); err != nil {
		w.failed = true
	}
}

// FlushError is Flush that reports the error (http.ResponseController).
func (w *response) FlushError() error {
	w.Flush()
	if w.failed {
		return errors.New("write to client failed")
	}
	return nil
}

// Hijack hands the connection to the handler (protocol switches).
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.wroteHeader {
		return nil, nil, errors.New("hijack after the response header was written")
	}
	w.hijacked = true
	c := w.c
	c.nc.SetDeadline(time.Time{})
	// Like net/http, the server stops tracking a hijacked connection:
	// Shutdown does not wait for a WebSocket.
	c.s.forget(c)
	// The buffers go with the connection: the handler owns them now.
	return c.nc, bufio.NewReadWriter(c.br, c.bw), nil
}

// finish ends the response. It reports whether the connection is still in
// a state to carry another request.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if _, trailers := w.header["Trailer"]; !w.committed && trailers && w.req.ProtoAtLeast(1, 1) && !w.noBody {
		// Trailers need chunked encoding, even around an empty body.
		w.commit(true)
		w.writeBody(w.pending)
	}
	if !w.committed {
		// The handler finished within the held-back bytes: the length is
		// known after all.
		w.length = int64(len(w.pending))
		w.header["Content-Length"] = []string{strconv.Itoa(len(w.pending))}
		w.commit(false)
		w.writeBody(w.pending)
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		for k, vv := range w.header {
			name, ok := strings.CutPrefix(k, http.TrailerPrefix)
			if !ok || !httpguts.ValidHeaderFieldName(name) {
				continue
			}
			for _, v := range vv {
				bw.WriteString(http.CanonicalHeaderKey(name))
				bw.WriteString(": ")
				writeHeaderValue(bw, v)
				bw.WriteString("\r\n")
			}
		}
		bw.WriteString("\r\n")
	}
	if err := bw.Flush(); err != nil || w.failed {
		return false
	}
	// A body shorter than it said it would be cannot be followed by
	// another response on the same connection.
	return w.noBody || w.length < 0 || w.written == w.length
}

// httpDate returns the current time in HTTP date format, recomputed at
// most once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := cachedDate.Load(); d != nil && d.unix == now {
		return d.text
	}
	d := &dateCache{unix: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.text
}

type dateCache struct {
	unix int64
	text string
}

var cachedDate atomic.Pointer[dateCache]
