package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// startH1 serves h on an Server and, beside it, on a net/http.Server
// with the same limits, and returns both addresses.
func startH1(t *testing.T, h http.Handler, maxHeader int) (ours, std string) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s1 := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: maxHeader, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s2 := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: maxHeader}
	go s1.Serve(l1)
	go s2.Serve(l2)
	t.Cleanup(func() { s1.Close(); s2.Close() })
	return l1.Addr().String(), l2.Addr().String()
}

// exchange writes raw to addr and returns everything the server sends
// until it closes the connection or goes quiet for a moment after
// answering.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(raw))
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
		// Once a response is in, a short quiet spell ends the wait.
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	}
}

func statuses(resp string) []string {
	var out []string
	for _, line := range strings.Split(resp, "\r\n") {
		if strings.HasPrefix(line, "HTTP/1.") && len(line) >= 12 {
			out = append(out, line[9:12])
		}
	}
	return out
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ok:"+r.Host)
})

// TestH1ServerRejectsWhatNetHTTPRejects runs tricky and malicious requests
// against both servers and requires the same verdict (status codes) from
// each: the request-smuggling defences are net/http's. (What the server
// refuses beyond them: TestH1ServerRejectsAmbiguousFraming.)
func TestH1ServerRejectsWhatNetHTTPRejects(t *testing.T) {
	ours, std := startH1(t, okHandler, 1<<10)
	cases := map[string]string{
		"plain":                       "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"two different CLs":           "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"CL with sign":                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
		"TE not chunked":              "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
		"TE chunked twice":            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
		"space before colon":          "GET / HTTP/1.1\r\nHost: a\r\nX-Bad : 1\r\n\r\n",
		"control char in value":       "GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\n\r\n",
		"obs-fold":                    "GET / HTTP/1.1\r\nHost: a\r\nX-Fold: a\r\n b\r\n\r\n",
		"missing Host":                "GET / HTTP/1.1\r\n\r\n",
		"two Host headers":            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"bad Host":                    "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"HTTP/1.0 without Host":       "GET / HTTP/1.0\r\n\r\n",
		"HTTP/3.0":                    "GET / HTTP/3.0\r\nHost: a\r\n\r\n",
		"garbage":                     "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
		"header too large":            "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", 8<<10) + "\r\n\r\n",
		"Expect other than continue":  "POST / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx",
		"bad chunk size":              "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"absolute-form target":        "GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"chunked body":                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.0 keep-alive":         "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\nHost: a\r\n\r\n",
		"Connection close stops next": "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			got, want := statuses(exchange(t, ours, raw)), statuses(exchange(t, std, raw))
			// net/http may answer a second request on the connection
			// later than the test waits; the first verdict is the one
			// that matters.
			if len(got) == 0 || len(want) == 0 || got[0] != want[0] {
				t.Fatalf("Server answered %v, net/http %v", got, want)
			}
		})
	}
	if got := statuses(exchange(t, ours, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); len(got) != 1 || got[0] != "505" {
		t.Fatalf("HTTP/2 preface on a cleartext HTTP/1 listener: %v, want 505", got)
	}
}

func TestH1ServerAnswersPipelinedRequestsInOrder(t *testing.T) {
	ours, _ := startH1(t, okHandler, 1<<20)
	resp := exchange(t, ours, "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: c\r\n\r\n")
	if i, j, k := strings.Index(resp, "ok:a"), strings.Index(resp, "ok:b"), strings.Index(resp, "ok:c"); i < 0 || j < i || k < j {
		t.Fatalf("pipelined responses out of order or missing:\n%s", resp)
	}
}

func TestH1ServerKeepAliveAndClose(t *testing.T) {
	ours, _ := startH1(t, okHandler, 1<<20)
	resp := exchange(t, ours, "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
	if n := strings.Count(resp, "HTTP/1.1 200 OK\r\n"); n != 2 || !strings.HasSuffix(resp, "ok:b") || !strings.Contains(resp, "Connection: close\r\n") {
		t.Fatalf("two pipelined requests, the second with Connection: close:\n%s", resp)
	}
	if !strings.Contains(resp, "Content-Length: 4\r\n") || !strings.Contains(resp, "Date: ") {
		t.Fatalf("a small response gets its length and a Date:\n%s", resp)
	}
	resp = exchange(t, ours, "GET / HTTP/1.0\r\nHost: a\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") || !strings.Contains(resp, "Connection: close\r\n") {
		t.Fatalf("HTTP/1.0 without keep-alive:\n%s", resp)
	}
}

func TestH1ServerExpectContinue(t *testing.T) {
	ours, _ := startH1(t, okHandler, 1<<20)
	c, err := net.Dial("tcp", ours)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, want 100 Continue before the body is sent", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "hello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("final response: %v %v", resp, err)
	}
}

func TestH1ServerChunksResponsesOfUnknownLength(t *testing.T) {
	ours, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "part1")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part2")
		w.Header().Set(http.TrailerPrefix+"X-Sum", "42")
	}), 1<<20)
	resp, err := http.Get("http://" + ours + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "part1part2" || resp.TransferEncoding[0] != "chunked" || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("body %q, TE %v, trailer %v", body, resp.TransferEncoding, resp.Trailer)
	}
}

func TestH1ServerShutdownClosesIdleAndWaitsForActive(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	}), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	addr := l.Addr().String()

	idle, _ := net.Dial("tcp", addr)
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	ibr := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(ibr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatal(err)
	} else {
		io.ReadAll(resp.Body)
	}

	slowDone := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slowDone <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slowDone <- string(b)
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The idle connection is closed by the server.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if got := <-slowDone; got != "done" {
		t.Fatalf("in-flight request: %q", got)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

func TestRequestURIEscapesWhatCouldEndTheRequestLine(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://a/public%20HTTP/1.0%20/admin", nil)
	r.RequestURI = "/public HTTP/1.0 /admin" // as HTTP/2's :path may carry it
	if got := RequestURI(r); got != "/public%20HTTP/1.0%20/admin" {
		t.Fatalf("requestURI = %q", got)
	}
	r.RequestURI = "/ok?q=a HTTP/1.0 /admin"
	r.URL.Path, r.URL.RawQuery = "/ok", "q=a HTTP/1.0 /admin"
	if got := RequestURI(r); got != "/ok?q=a%20HTTP/1.0%20/admin" {
		t.Fatalf("requestURI with spaces in the query = %q", got)
	}
	r.RequestURI = "/ok?q=1"
	if got := RequestURI(r); got != "/ok?q=1" {
		t.Fatalf("a clean target must go as it came: %q", got)
	}
}

func TestH1ServerTimesOutATricklingBody(t *testing.T) {
	s := &Server{Handler: okHandler, ReadHeaderTimeout: time.Second, IdleTimeout: 200 * time.Millisecond, MaxHeaderBytes: 1 << 20, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	defer s.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nab")
	// The rest never comes: the server must give up after its idle
	// timeout, not hold the connection forever.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func TestH1ServerClosesWhenAnExpectedBodyWasNotAskedFor(t *testing.T) {
	ours, std := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusRequestEntityTooLarge) // answers without reading the body
	}), 1<<20)
	raw := "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
	got, want := exchange(t, ours, raw), exchange(t, std, raw)
	if !strings.Contains(got, "Connection: close\r\n") || strings.Contains(got, "100 Continue") {
		t.Fatalf("Server:\n%s\nnet/http:\n%s", got, want)
	}
}

// readToEOF writes raw to addr and returns all the server sends until it
// closes the connection; it fails the test if the server leaves it open.
func readToEOF(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the server left the connection open (%v) after sending:\n%s", err, b)
	}
	return string(b)
}

// TestH1ServerRejectsAmbiguousFraming: a request with both Content-Length
// and Transfer-Encoding, or with Transfer-Encoding on HTTP/1.0, is
// answered 400 and the connection closed (net/http serves both and keeps
// the connection open), so the request pipelined behind it is never read.
// The fields are found however they are spelled, and in a head too long
// for the read buffer.
func TestH1ServerRejectsAmbiguousFraming(t *testing.T) {
	var mu sync.Mutex
	var served []string
	ours, _ := startH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		okHandler(w, r)
	}), 1<<20)
	pad := "X-Pad: " + strings.Repeat("p", 6000) + "\r\n"
	second := "GET /second HTTP/1.1\r\nHost: a\r\n\r\n"
	cases := map[string]string{
		"CL and TE":                 "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TE then CL, lower case":    "POST /first HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n",
		"CL and TE, bare LF":        "POST /first HTTP/1.1\nHost: a\nContent-Length: 5\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
		"CL and TE after 6KB":       "POST /first HTTP/1.1\r\nHost: a\r\n" + pad + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.0 with TE":          "POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.0 GET with TE":      "GET /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.0 with TE and CL":   "POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.0 with TE after 6K": "GET /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n" + pad + "Transfer-Encoding: chunked\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			mu.Lock()
			served = nil
			mu.Unlock()
			resp := readToEOF(t, ours, raw+second)
			if got := statuses(resp); len(got) != 1 || got[0] != "400" || !strings.Contains(resp, "Connection: close\r\n") {
				t.Fatalf("want one 400 with Connection: close, then the close; got:\n%s", resp)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(served) != 0 {
				t.Fatalf("the handler served %v", served)
			}
		})
	}
	// Chunked alone, and Content-Length alone, still carry a pipelined
	// request behind them.
	for _, raw := range []string{
		"POST /first HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n" + pad + "\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nContent-Length: 3\r\n" + pad + "\r\nabc",
	} {
		resp := readToEOF(t, ours, raw+"GET /second HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		if n := strings.Count(resp, "HTTP/1.1 200 OK\r\n"); n != 2 {
			t.Fatalf("a request with one framing field and one behind it: %d answers of 200, want 2:\n%s", n, resp)
		}
	}
}

// TestServeConnServesATLSConnectionWithItsState: a TLS connection handed
// over after its handshake is served like an accepted one; each of its
// requests carries the connection's TLS state, taken once; Shutdown
// closes it when idle, and a connection handed over after Shutdown is
// closed at once.
func TestServeConnServesATLSConnectionWithItsState(t *testing.T) {
	certFile, keyFile := testutil.WriteKeyPair(t, t.TempDir(), "server")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []*tls.ConnectionState
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		states = append(states, r.TLS)
		mu.Unlock()
		if r.TLS != nil {
			io.WriteString(w, r.TLS.NegotiatedProtocol)
		}
	}), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan struct{}, 2)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
				if err := tc.Handshake(); err != nil {
					nc.Close()
					return
				}
				s.ServeConn(tc)
				served <- struct{}{}
			}()
		}
	}()
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := dial()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "http/1.1" {
			t.Fatalf("request %d: %d %q; want 200 and the handler to see ALPN's http/1.1 in r.TLS", i, resp.StatusCode, body)
		}
	}
	mu.Lock()
	if len(states) != 2 || states[0] == nil || states[0] != states[1] || !states[0].HandshakeComplete {
		t.Fatalf("r.TLS of the two requests: %v; want one completed state, shared", states)
	}
	mu.Unlock()

	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle TLS connection after Shutdown: %v, want EOF", err)
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn did not return after Shutdown closed its connection")
	}
	late := dial()
	defer late.Close()
	late.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := late.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection handed over after Shutdown: %v, want it closed", err)
	}
}

// TestH1ServerBoundsTheNextHeadAfterABodylessRequest: a request without a
// body leaves the connection's read deadline as it was (nothing more is
// read for it, and a head already buffered is parsed without a read), yet
// the next request's head, when it trickles in, is held to
// ReadHeaderTimeout, not to the far longer idle timeout: whether it comes
// after a wait or pipelined behind the first.
func TestH1ServerBoundsTheNextHeadAfterABodylessRequest(t *testing.T) {
	s := &Server{Handler: okHandler, ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Minute, MaxHeaderBytes: 1 << 20,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	const get, partial = "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\n"
	for _, tc := range []struct {
		name   string
		writes []string
	}{
		{"after a wait", []string{get, partial}},
		{"pipelined", []string{get + partial}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for _, w := range tc.writes {
				if _, err := io.WriteString(c, w); err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(w, get) {
					continue
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("first request: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			start := time.Now()
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("a head that stopped coming: %v, want the server to close the connection", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("connection closed after %v, want about the 300ms read-header timeout (the idle timeout is a minute)", d)
			}
		})
	}
}

// A header name that is not a token — net/http's parser keeps an
// upstream's "Content-Length :" as the name "Content-Length " — is never
// written to the client, in the header or the trailer.
func TestInvalidHeaderNamesAreNotWritten(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Length "] = []string{"0"}
		w.Header()["Transfer-Encoding "] = []string{"chunked"}
		w.Header()["Bad Name"] = []string{"x"}
		w.(http.Flusher).Flush() // unknown length: chunked, with trailers
		io.WriteString(w, "hello")
		w.Header()[http.TrailerPrefix+"X-Sum"] = []string{"5"}
		w.Header()[http.TrailerPrefix+"X-Bad Trailer"] = []string{"y"}
	})
	ours, _ := startH1(t, h, 1<<20)
	resp := exchange(t, ours, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	for _, bad := range []string{"Content-Length :", "Transfer-Encoding :", "Bad Name", "X-Bad Trailer"} {
		if strings.Contains(resp, bad) {
			t.Errorf("the response carries %q:\n%s", bad, resp)
		}
	}
	if !strings.Contains(resp, "hello") || !strings.Contains(resp, "X-Sum: 5") {
		t.Fatalf("the response lost its body or its valid trailer:\n%s", resp)
	}
}
