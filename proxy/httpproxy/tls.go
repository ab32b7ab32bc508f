package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// connServer serves a listener's connections. On a TLS listener it
// completes each handshake itself, on the connection's own goroutine (a
// slow handshake holds up no other connection), bounded by the listener's
// read_header timeout, with the listener's current TLS settings (a reload
// reaches the next handshake), and then hands the *tls.Conn on: to
// net/http's server when ALPN chose h2, and to the HTTP/1 engine
// otherwise, so that HTTP/1.x is read by the same strict engine over TLS
// as in cleartext. On a cleartext listener every connection goes to the
// HTTP/1 engine, which hands those that open with HTTP/2's preface (h2c
// with prior knowledge, when the listener's h2c is on) to net/http's
// server. The engine takes new settings in place; net/http's server
// cannot, so a settings change gives new HTTP/2 connections a new one and
// the old one retires (h2Server).
type connServer struct {
	name string
	log  *slog.Logger
	cfg  *tls.Config // nil on a cleartext listener
	h    http.Handler
	addr net.Addr
	h1   *h1.Server
	// handshakeTimeout bounds each handshake: read_header, as net/http
	// bounds it.
	handshakeTimeout atomic.Int64
	// ctx ends with Shutdown or Close: handshakes under way are cut, and
	// a finished one is handed to no one.
	ctx  context.Context
	stop context.CancelFunc
	// h2conns takes handshaken HTTP/2 connections (and cleartext ones
	// with prior knowledge) to the h2Server that accepts them: the
	// current one.
	h2conns    chan net.Conn
	handshakes sync.WaitGroup
	serving    sync.WaitGroup // the h2Servers' Serve

	mu      sync.Mutex
	lis     []net.Listener
	h2      *h2Server   // serves new HTTP/2 connections
	retired []*h2Server // replaced by settings changes, with connections left
	closed  bool
}

func newConnServer(l *listener, st serverSettings, log *slog.Logger) *connServer {
	ts := &connServer{
		name:    l.name,
		log:     log,
		h:       l.handler,
		addr:    l.loop.addr,
		h1:      &h1.Server{Handler: l.handler, Log: log},
		h2conns: make(chan net.Conn),
	}
	if st.tls {
		// Each handshake runs on the listener's current settings.
		ts.cfg = &tls.Config{
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				if lt := l.tls.Load(); lt != nil {
					return lt.conf, nil
				}
				return nil, errNoCertSource
			},
		}
	}
	ts.ctx, ts.stop = context.WithCancel(context.Background())
	ts.handshakeTimeout.Store(int64(st.readHeader))
	ts.h1.SetSettings(h1Settings(st))
	ts.setPriorKnowledge(st)
	ts.h2 = ts.startH2(st)
	return ts
}

// setPriorKnowledge turns h2c on or off on a cleartext listener.
func (ts *connServer) setPriorKnowledge(st serverSettings) {
	if ts.cfg != nil || !st.h2c {
		ts.h1.SetPriorKnowledge(nil)
		return
	}
	ts.h1.SetPriorKnowledge(func(c net.Conn) {
		select {
		case ts.h2conns <- c:
		case <-ts.ctx.Done():
			c.Close()
		}
	})
}

// Serve accepts connections on l and hands each, after its handshake, to
// the server of its protocol, until Shutdown or Close.
func (ts *connServer) Serve(l net.Listener) error {
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return http.ErrServerClosed
	}
	ts.lis = append(ts.lis, l)
	ts.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			if ts.ctx.Err() != nil {
				return http.ErrServerClosed
			}
			return err
		}
		// Counted under mu, so that Shutdown's Wait comes after every Add.
		ts.mu.Lock()
		if ts.closed {
			ts.mu.Unlock()
			nc.Close()
			return http.ErrServerClosed
		}
		ts.handshakes.Add(1)
		ts.mu.Unlock()
		go func() {
			if ts.cfg == nil {
				ts.handshakes.Done()
				ts.h1.ServeConn(nc)
			} else if tc := ts.handshake(nc); tc != nil {
				ts.h1.ServeConn(tc)
			}
		}()
	}
}

// handshake completes nc's TLS handshake and hands an HTTP/2 connection
// to net/http's server. It returns the connection when it is the HTTP/1
// engine's (ALPN chose http/1.1, or nothing), else nil.
func (ts *connServer) handshake(nc net.Conn) *tls.Conn {
	defer ts.handshakes.Done()
	ctx := ts.ctx
	if d := time.Duration(ts.handshakeTimeout.Load()); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	tc := tls.Server(nc, ts.cfg)
	// When ctx ends first, the handshake closes nc.
	if err := tc.HandshakeContext(ctx); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			// A client speaking cleartext HTTP to a TLS port: tell it so,
			// as net/http does.
			re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		nc.Close()
		ts.log.Debug("TLS handshake failed", "listener", ts.name, "remote", nc.RemoteAddr().String(), "error", err)
		return nil
	}
	switch tc.ConnectionState().NegotiatedProtocol {
	case "h2":
	case "", "http/1.1":
		return tc
	default:
		// A protocol of a certificate source's own (ACME's acme-tls/1),
		// whose handshake was the whole exchange.
		tc.Close()
		return nil
	}
	select {
	case ts.h2conns <- tc:
	case <-ts.ctx.Done():
		tc.Close()
	}
	return nil
}

// looksLikeHTTP reports whether the first bytes of a would-be TLS record
// are those of a cleartext HTTP request (net/http's test).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// setSettings moves the server to st without closing a connection: the
// HTTP/1 engine takes st in place, and the next handshakes are bounded by
// its read_header. HTTP/2 connections are net/http's, whose settings do
// not change while it serves: new ones go to a new net/http server, and
// the old one retires.
func (ts *connServer) setSettings(st serverSettings) {
	ts.handshakeTimeout.Store(int64(st.readHeader))
	ts.h1.SetSettings(h1Settings(st))
	ts.setPriorKnowledge(st)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return
	}
	old := ts.h2
	ts.h2 = ts.startH2(st)
	old.lis.Close() // it takes no more connections
	ts.retired = slices.DeleteFunc(ts.retired, (*h2Server).done)
	ts.retired = append(ts.retired, old)
}

// startH2 starts a net/http server for HTTP/2 connections with settings
// st.
func (ts *connServer) startH2(st serverSettings) *h2Server {
	hs := &h2Server{h: ts.h, readBody: st.readBody, served: make(chan struct{}),
		lis: newHandoff(ts.h2conns, ts.ctx.Done(), ts.addr)}
	hs.Server = &http.Server{
		Handler: hs,
		// read_header bounds the handshake, which is done by then; for
		// HTTP/2 net/http takes the idle timeout and the header limit.
		IdleTimeout:    st.idle,
		MaxHeaderBytes: st.maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(ts.log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, cs http.ConnState) {
			switch cs {
			case http.StateNew:
				hs.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				hs.conns.Add(-1)
			}
		},
		// No TLSConfig: Serve then sets up HTTP/2 for the *tls.Conn
		// values it is handed, whose handshake chose h2.
	}
	if ts.cfg == nil {
		// Cleartext: only connections that open with the preface come
		// here (h1.Server.SetPriorKnowledge).
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		hs.Protocols = &p
	}
	ts.serving.Add(1)
	go func() {
		defer ts.serving.Done()
		defer close(hs.served)
		if err := hs.Serve(hs.lis); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			ts.log.Error("HTTP/2 server stopped", "listener", ts.name, "error", err)
		}
	}()
	return hs
}

// close stops taking connections and cuts the handshakes under way. It
// returns the HTTP/2 servers that may still have connections.
func (ts *connServer) close() []*h2Server {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	ts.stop()
	for _, l := range ts.lis {
		l.Close()
	}
	return append([]*h2Server{ts.h2}, ts.retired...)
}

// Shutdown stops taking connections, then lets the HTTP/1 engine and the
// HTTP/2 servers drain (idle connections closed, HTTP/2 told by GOAWAY),
// until ctx ends.
func (ts *connServer) Shutdown(ctx context.Context) error {
	h2s := ts.close()
	ts.handshakes.Wait()
	errs := make(chan error, 1+len(h2s))
	go func() { errs <- ts.h1.Shutdown(ctx) }()
	for _, hs := range h2s {
		go func() { errs <- hs.Shutdown(ctx) }()
	}
	var err error
	for range 1 + len(h2s) {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	ts.serving.Wait()
	return err
}

// Close closes every connection at once.
func (ts *connServer) Close() error {
	h2s := ts.close()
	ts.h1.Close()
	for _, hs := range h2s {
		hs.Close()
	}
	ts.handshakes.Wait()
	ts.serving.Wait()
	return nil
}

// h2Server is the net/http server of a TLS listener's HTTP/2 connections,
// under one set of settings. When a settings change replaces it, it takes
// no new connections and those it has live out their life on the old
// settings, until they close by themselves (idle timeout, or the client):
// a GOAWAY would race requests already sent, and a request whose body
// cannot be sent again would fail. It counts its connections, so that it
// can be forgotten once they are gone.
type h2Server struct {
	*http.Server
	h        http.Handler
	readBody time.Duration // bound on each read of a request body
	lis      *handoff
	conns    atomic.Int64  // open connections
	served   chan struct{} // closed when Serve has returned
}

// done reports whether a replaced server has nothing left: Serve returned
// and every connection is closed.
func (hs *h2Server) done() bool {
	select {
	case <-hs.served:
		return hs.conns.Load() == 0
	default:
		return false
	}
}

func (hs *h2Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if hs.readBody > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), d: hs.readBody}
	}
	hs.h.ServeHTTP(w, r)
}

// deadlineBody gives each read of an HTTP/2 request body the body read
// timeout, as the HTTP/1 engine does for its connections. Once the body
// has ended the deadline is cleared. A body that did not end keeps its
// last deadline: a client that stalled must not hold what net/http does
// with the rest of it forever.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	d        time.Duration
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.rc.SetReadDeadline(time.Time{})
	case err != nil && isTimeout(err):
		b.timedOut.Store(true)
	}
	return n, err
}

// TimedOut reports whether a read ran into the body read timeout (the
// handler then answers 408, not 499).
func (b *deadlineBody) TimedOut() bool { return b.timedOut.Load() }

// isTimeout reports whether err is a deadline's: a net.Error that timed
// out, or HTTP/2's os.ErrDeadlineExceeded.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
