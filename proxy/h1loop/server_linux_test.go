//go:build linux

package h1loop_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1loop"
	"github.com/switchboard-dev/switchboard/upstream"
)

// front is a loop front end in front of one upstream server, with a
// Handler that forwards every request it is given.
type front struct {
	t       *testing.T
	addr    string
	ln      net.Listener // the listener given to New, which closes it
	srv     *h1loop.Server
	route   atomic.Pointer[pipeline.Route]
	up      h1loop.Upstream
	served  atomic.Int64  // exchanges Done
	statusC chan int      // each Done's status
	handed  chan net.Conn // connections handed to the goroutine engine
	refuse  atomic.Pointer[func(*http.Request) bool]
}

func newFront(t *testing.T, backend http.Handler, st h1loop.Settings, up h1loop.Upstream) *front {
	t.Helper()
	be := httptest.NewServer(backend)
	t.Cleanup(be.Close)
	u, err := upstream.New("be", upstream.Config{Targets: []endpoint.Spec{{Address: be.Listener.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	route, err := pipeline.New("r", pipeline.Config{Timeout: 20 * time.Second}, u, pipeline.HTTPTransport{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{t: t, addr: ln.Addr().String(), ln: ln, up: up, statusC: make(chan int, 100), handed: make(chan net.Conn, 10)}
	f.route.Store(route)
	f.srv, err = h1loop.New(ln, f, func(nc net.Conn) { f.handed <- nc }, st, 2)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.srv.Shutdown(ctx)
		f.srv.Close()
	})
	return f
}

// Begin implements h1loop.Handler.
func (f *front) Begin(r *http.Request, now time.Time, _ h1loop.Exchange) h1loop.Exchange {
	if fn := f.refuse.Load(); fn != nil && (*fn)(r) {
		return nil
	}
	x := &testExchange{f: f}
	x.call.Req = r
	if r.ContentLength > 0 {
		x.call.Body = r.Body.(pipeline.BufferedBody)
	}
	return x
}

type testExchange struct {
	f    *front
	call pipeline.Call
}

func (x *testExchange) Call() (*pipeline.Route, *pipeline.Call, h1loop.Upstream) {
	return x.f.route.Load(), &x.call, x.f.up
}

func (x *testExchange) Respond(resp *http.Response) http.Header {
	h := http.Header{}
	for k, v := range resp.Header {
		h[k] = v
	}
	return h
}

func (x *testExchange) Fail(err error) (int, http.Header, []byte) {
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		return 502, http.Header{}, []byte(err.Error())
	}
	return pe.Status, http.Header{"X-Code": {pe.Code}}, []byte(pe.Msg)
}

func (x *testExchange) Done(status int, in, out int64, bodyErr error, _ time.Time) {
	x.call.Finish(status, bodyErr)
	x.f.served.Add(1)
	x.f.statusC <- status
}

func (f *front) dial() (net.Conn, *bufio.Reader) {
	f.t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func echoPath(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Conn", r.RemoteAddr)
	io.WriteString(w, "path="+r.URL.RequestURI())
}

func TestKeepAliveServesRequestsOnOneClientAndOneUpstreamConnection(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	var upConn string
	for i := 0; i < 3; i++ {
		fmt.Fprintf(c, "GET /n/%d?q=1 HTTP/1.1\r\nHost: x\r\n\r\n", i)
		resp, body := readResponse(t, br, "GET")
		if resp.StatusCode != 200 || body != fmt.Sprintf("path=/n/%d?q=1", i) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if resp.Close {
			t.Fatalf("request %d: the loop closes a keep-alive connection", i)
		}
		if i == 0 {
			upConn = resp.Header.Get("X-Conn")
		} else if got := resp.Header.Get("X-Conn"); got != upConn {
			t.Fatalf("request %d came over upstream connection %s, the first over %s: not pooled", i, got, upConn)
		}
	}
	if n := f.served.Load(); n != 3 {
		t.Fatalf("the loop served %d requests, want 3", n)
	}
	if len(f.handed) != 0 {
		t.Fatal("a plain GET was handed to the goroutine engine")
	}
}

func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+
		"HEAD /c HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	for _, want := range []struct{ method, body string }{{"GET", "path=/a"}, {"POST", "path=/b"}, {"HEAD", ""}, {"GET", "path=/d"}} {
		resp, body := readResponse(t, br, want.method)
		if resp.StatusCode != 200 || body != want.body {
			t.Fatalf("%s: %d %q, want 200 %q", want.method, resp.StatusCode, body, want.body)
		}
		if want.method == "HEAD" && resp.ContentLength != int64(len("path=/c")) {
			t.Fatalf("HEAD: Content-Length %d, want the GET's %d", resp.ContentLength, len("path=/c"))
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close: %v, want EOF", err)
	}
}

func TestRequestBodyInTheBufferGoesUpstream(t *testing.T) {
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d:%s", r.ContentLength, b)
	}), h1loop.Settings{}, h1loop.Upstream{})
	c, br := f.dial()
	io.WriteString(c, "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world")
	if _, body := readResponse(t, br, "PUT"); body != "11:hello world" {
		t.Fatalf("upstream saw %q", body)
	}
}

// handedBytes reads what a handed-off connection yields first.
func handedBytes(t *testing.T, f *front, n int) string {
	t.Helper()
	select {
	case nc := <-f.handed:
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, n)
		if _, err := io.ReadFull(nc, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing handed to the goroutine engine")
	}
	return ""
}

func TestUpgradeAndChunkedBodiesAreHandedOffWithTheirBytes(t *testing.T) {
	for name, req := range map[string]string{
		"upgrade":  "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"chunked":  "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"expect":   "PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
		"http/1.0": "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
		"both":     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"2 hosts":  "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{})
			c, br := f.dial()
			// A request the loop serves first, then the one it does not:
			// the hand-off comes at that request, its bytes unread.
			io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"+req)
			if _, body := readResponse(t, br, "GET"); body != "path=/first" {
				t.Fatalf("first request: %q", body)
			}
			if got := handedBytes(t, f, len(req)); got != req {
				t.Fatalf("handed off %q, want %q", got, req)
			}
			if n := f.served.Load(); n != 1 {
				t.Fatalf("the loop served %d requests, want 1", n)
			}
		})
	}
}

func TestHandlerRefusalHandsTheRequestOff(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{})
	refuse := func(r *http.Request) bool { return r.URL.Path == "/admin" }
	f.refuse.Store(&refuse)
	c, _ := f.dial()
	req := "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
	io.WriteString(c, req)
	if got := handedBytes(t, f, len(req)); got != req {
		t.Fatalf("handed off %q, want %q", got, req)
	}
}

func TestChunkedAndCloseDelimitedResponsesAreRelayed(t *testing.T) {
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for i := 0; i < 3; i++ {
				io.WriteString(w, strings.Repeat("ab", 1000))
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "6000")
		case "/close":
			nc, bw, _ := http.NewResponseController(w).Hijack()
			bw.WriteString("HTTP/1.0 200 OK\r\nX-Old: 1\r\n\r\nuntil the end")
			bw.Flush()
			nc.Close()
		}
	}), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if body != strings.Repeat("ab", 3000) || resp.Trailer.Get("X-Sum") != "6000" {
		t.Fatalf("chunked: %d bytes, trailer %q", len(body), resp.Trailer.Get("X-Sum"))
	}
	io.WriteString(c, "GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body = readResponse(t, br, "GET")
	if body != "until the end" || !resp.Close || resp.Header.Get("X-Old") != "1" {
		t.Fatalf("close-delimited: %q close=%v", body, resp.Close)
	}
}

func TestSlowClientDoesNotMakeTheLoopBufferTheResponse(t *testing.T) {
	const total = 256 << 20
	stalled := make(chan int64, 1)
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(total))
		rc := http.NewResponseController(w)
		buf := make([]byte, 64<<10)
		var n int64
		for n < total {
			// A write that waits this long means the proxy stopped
			// reading: it is holding back, not buffering.
			rc.SetWriteDeadline(time.Now().Add(2 * time.Second))
			m, err := w.Write(buf)
			n += int64(m)
			if err != nil {
				stalled <- n
				return
			}
		}
		stalled <- -1
	}), h1loop.Settings{}, h1loop.Upstream{})
	c, _ := f.dial()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(64 << 10)
	}
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case n := <-stalled:
		if n < 0 {
			t.Fatalf("the upstream wrote all %d bytes to a client that read none: the proxy buffered the response", total)
		}
		if n > total/4 {
			t.Fatalf("the upstream wrote %d bytes before it stalled; the proxy holds too much", n)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the upstream neither stalled nor finished")
	}
}

func TestClientTimeoutsCloseTheConnection(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, h1loop.Upstream{})
	t.Run("read header", func(t *testing.T) {
		c, br := f.dial()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("a head that stopped coming: %v, want EOF", err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c, br := f.dial()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		readResponse(t, br, "GET")
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("an idle keep-alive connection: %v, want EOF", err)
		}
	})
}

func TestUpstreamResponseHeaderTimeoutIs504(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}), h1loop.Settings{}, h1loop.Upstream{ResponseHeaderTimeout: 200 * time.Millisecond})
	c, br := f.dial()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := readResponse(t, br, "POST")
	once.Do(func() { close(release) })
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Code") != pipeline.CodeUpstreamTimeout {
		t.Fatalf("got %d %q, want 504 %s", resp.StatusCode, resp.Header.Get("X-Code"), pipeline.CodeUpstreamTimeout)
	}
}

func TestRefusedConnectIs502(t *testing.T) {
	// A port nothing listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{})
	u, _ := upstream.New("dead", upstream.Config{Targets: []endpoint.Spec{{Address: dead}}})
	t.Cleanup(u.Close)
	r, _ := pipeline.New("dead", pipeline.Config{}, u, pipeline.HTTPTransport{})
	f.route.Store(r)
	c, br := f.dial()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("refused connect: %d, want 502", resp.StatusCode)
	}
	if s := <-f.statusC; s != http.StatusBadGateway {
		t.Fatalf("Done with %d, want 502", s)
	}
}

// TestReusedHeadersDoNotLeakBetweenRequests: a connection's requests
// reuse its header maps; a field one request (or its response) had is
// not seen by the next.
func TestReusedHeadersDoNotLeakBetweenRequests(t *testing.T) {
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Once"); v != "" {
			w.Header().Set("X-Once-Back", v)
		}
		fmt.Fprintf(w, "%s:%d", r.URL.Path, len(r.Header))
	}), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\nX-Once: a\r\nX-Two: b\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if body != "/1:2" || resp.Header.Get("X-Once-Back") != "a" {
		t.Fatalf("first request: %q %v; want /1:2 (X-Once, X-Two) and X-Once-Back", body, resp.Header)
	}
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body = readResponse(t, br, "GET")
	if body != "/2:0" || resp.Header.Get("X-Once-Back") != "" {
		t.Fatalf("second request: %q %v; want /2:0 and no field of the first", body, resp.Header)
	}
}

// TestPipelinedHeadGetsItsOwnReadHeaderTimeout: the read-header timeout
// of a pipelined request whose head came in part with the request before
// it counts from when the loop turns to it (as net/http counts it from
// when it starts reading a request), not from when its first bytes came:
// a first request that took longer than the timeout does not get the
// connection closed under the second.
func TestPipelinedHeadGetsItsOwnReadHeaderTimeout(t *testing.T) {
	const rht = 300 * time.Millisecond
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-time.After(3 * rht) // an upstream slower than the client's read-header timeout
		}
		echoPath(w, r)
	}), h1loop.Settings{ReadHeaderTimeout: rht}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHo")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "path=/slow" {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	if _, err := io.WriteString(c, "st: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("the pipelined request whose head's rest came after the first answer: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "path=/b" {
		t.Fatalf("second: %d %q", resp.StatusCode, b)
	}
}

// TestInformationalResponsesBeforeTheAnswerAreSkipped: interim answers
// (102, 103 Early Hints) before the final one are skipped, as 100 is and
// as proxy/h1's Client skips them, not taken for a broken upstream.
func TestInformationalResponsesBeforeTheAnswerAreSkipped(t *testing.T) {
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusProcessing)
		echoPath(w, r)
	}), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /hints HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if resp.StatusCode != 200 || body != "path=/hints" {
		t.Fatalf("after interim answers: %d %q, want 200 %q", resp.StatusCode, body, "path=/hints")
	}
}

// TestIdleTimeoutDoesNotCutAHeadInProgress: with no read-header timeout,
// a head whose first bytes came is not held to the idle timeout, which is
// for the wait between requests (as net/http's IdleTimeout).
func TestIdleTimeoutDoesNotCutAHeadInProgress(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{IdleTimeout: 100 * time.Millisecond}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	io.WriteString(c, "GET /slow HTTP/1.1\r\n")
	time.Sleep(300 * time.Millisecond) // the client is slow: three idle timeouts pass mid-head
	io.WriteString(c, "Host: x\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if resp.StatusCode != 200 || body != "path=/slow" {
		t.Fatalf("%d %q, want the answer", resp.StatusCode, body)
	}
}
