package plane_test

// TLS listeners: the handshake is the listener's own, HTTP/1.x is then
// read by the HTTP/1 engine and HTTP/2 by net/http.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/switchboard-dev/switchboard/config"
)

// httpsClient returns a client of a TLS listener speaking HTTP/2, or
// HTTP/1.1 only.
func httpsClient(t *testing.T, h2 bool) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func protoName(h2 bool) string {
	if h2 {
		return "HTTP/2.0"
	}
	return "HTTP/1.1"
}

// TestSlowTLSHandshakeHoldsUpNoOneAndIsCutAtReadHeader: connections that
// never send a ClientHello, or only part of one, do not delay anyone else's
// handshake or request, and each is closed once read_header has passed.
func TestSlowTLSHandshakeHoldsUpNoOneAndIsCutAtReadHeader(t *testing.T) {
	const readHeader = 1500 * time.Millisecond
	b := newBackend(t, "a", nil)
	p := startProxy(t, strings.Replace(withTLS(t, upstreamYAML("", b.addr())),
		"    routes:", fmt.Sprintf("    timeouts: {read_header: %v}\n    routes:", readHeader), 1))
	addr := p.srv.Addr("web")

	var slow []net.Conn
	start := time.Now()
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 1 {
			// A TLS record header announcing a ClientHello, and no more.
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})
		}
		slow = append(slow, c)
	}
	for _, h2 := range []bool{false, true} {
		resp, body := get(t, httpsClient(t, h2), "https://"+addr+"/")
		if resp.StatusCode != 200 || body != "a" || resp.Proto != protoName(h2) {
			t.Fatalf("%s client beside stalled handshakes: %s %d %q", protoName(h2), resp.Proto, resp.StatusCode, body)
		}
	}
	if d := time.Since(start); d >= readHeader {
		t.Fatalf("the real clients took %v, as long as the stalled handshakes' read_header (%v): they waited for them", d, readHeader)
	}
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("stalled handshake %d: still open 10s later", i)
		}
		if d := time.Since(start); d < readHeader-100*time.Millisecond {
			t.Fatalf("stalled handshake %d: closed after %v, before read_header (%v)", i, d, readHeader)
		}
	}
}

// TestForwardedProtoIsHTTPSOverTLS: requests read from a TLS connection
// carry its state, over HTTP/1.1 (the HTTP/1 engine) and HTTP/2
// (net/http), and the upstream hears of it in X-Forwarded-Proto.
func TestForwardedProtoIsHTTPSOverTLS(t *testing.T) {
	b := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("X-Forwarded-Proto"))
	})
	p := startProxy(t, withTLS(t, upstreamYAML("", b.addr())))
	for _, h2 := range []bool{false, true} {
		c := httpsClient(t, h2)
		for i := range 2 { // the second request on the same connection
			resp, body := get(t, c, "https://"+p.srv.Addr("web")+"/")
			if resp.Proto != protoName(h2) || body != "https" {
				t.Fatalf("%s request %d: the upstream saw X-Forwarded-Proto %q, want https", resp.Proto, i, body)
			}
		}
	}
}

// TestCleartextRequestToATLSListenerIs400: a client speaking cleartext
// HTTP to a TLS listener is told so, as net/http tells it.
func TestCleartextRequestToATLSListenerIs400(t *testing.T) {
	b := newBackend(t, "a", nil)
	p := startProxy(t, withTLS(t, upstreamYAML("", b.addr())))
	resp := rawExchange(t, p.srv.Addr("web"), "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.0 400 ") || !strings.Contains(resp, "HTTP request to an HTTPS server") {
		t.Fatalf("got:\n%s", resp)
	}
}

// TestWebSocketOverTLS: an HTTP/1.1 upgrade on a TLS listener is
// tunnelled, as on a cleartext one.
func TestWebSocketOverTLS(t *testing.T) {
	b := newBackend(t, "ws", websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }).ServeHTTP)
	p := startProxy(t, withTLS(t, upstreamYAML("", b.addr())))
	cfg, err := websocket.NewConfig("wss://"+p.srv.Addr("web")+"/ws", "https://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TlsConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(10 * time.Second))
	for _, msg := range []string{"hello", strings.Repeat("x", 100000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		echo := make([]byte, len(msg))
		if _, err := io.ReadFull(ws, echo); err != nil || string(echo) != msg {
			t.Fatalf("echo of %d bytes: %v", len(msg), err)
		}
	}
}

// TestCertificateRotationReachesNewConnections: a reload with another
// certificate serves it to new connections at once, while connections
// made before keep working, over HTTP/1.1 and HTTP/2.
func TestCertificateRotationReachesNewConnections(t *testing.T) {
	b := newBackend(t, "a", nil)
	dir := t.TempDir()
	yaml := func(name string) string {
		return strings.Replace(upstreamYAML("", b.addr()), "    listen: 127.0.0.1:0\n",
			"    listen: 127.0.0.1:0\n    tls: {cert_file: "+dir+"/"+name+".crt, key_file: "+dir+"/"+name+".key}\n", 1)
	}
	// writeKeyPair writes name's certificate and key and returns the
	// certificate as the listener will send it.
	writeKeyPair := func(name string) []byte {
		cert, err := tls.LoadX509KeyPair(writeSelfSignedIn(t, dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return cert.Certificate[0]
	}
	leaf := func(c *tls.Conn) []byte { return c.ConnectionState().PeerCertificates[0].Raw }
	oldCert := writeKeyPair("old")
	p := startProxy(t, yaml("old"))
	addr := p.srv.Addr("web")
	before := map[bool]*rawConn{}
	for _, h2 := range []bool{false, true} {
		before[h2] = newRawConn(t, addr, h2)
		if !bytes.Equal(leaf(before[h2].c), oldCert) {
			t.Fatal("the first connection did not get the configured certificate")
		}
		before[h2].check(t, "before the rotation")
	}

	newCert := writeKeyPair("new")
	cfg, err := config.Parse("rotated.yaml", []byte(yaml("new")))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	for _, h2 := range []bool{false, true} {
		c := newRawConn(t, addr, h2)
		if !bytes.Equal(leaf(c.c), newCert) {
			t.Fatalf("%s: a connection made after the reload got the old certificate", protoName(h2))
		}
		c.check(t, "a new connection")
		before[h2].check(t, "a connection made before the rotation")
	}
}

// writeSelfSignedIn is writeSelfSigned into dir, under name.
func writeSelfSignedIn(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	c, k := writeSelfSigned(t)
	for from, to := range map[string]string{c: dir + "/" + name + ".crt", k: dir + "/" + name + ".key"} {
		if err := os.WriteFile(to, mustRead(t, from), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir + "/" + name + ".crt", dir + "/" + name + ".key"
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawConn is one TLS connection to a listener, speaking HTTP/1.1 or
// HTTP/2, on which check sends a GET.
type rawConn struct {
	c  *tls.Conn
	cc *http.ClientConn
}

func newRawConn(t *testing.T, addr string, h2 bool) *rawConn {
	t.Helper()
	rc := &rawConn{}
	proto := "http/1.1"
	var protos http.Protocols
	if h2 {
		proto = "h2"
		protos.SetHTTP2(true)
	} else {
		protos.SetHTTP1(true)
	}
	tr := &http.Transport{Protocols: &protos, DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
		rc.c = dialTLS(t, addr, proto)
		return rc.c, nil
	}}
	cc, err := tr.NewClientConn(context.Background(), "https", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	rc.cc = cc
	return rc
}

// check sends a GET on the connection and wants the backend's 200 "a".
func (rc *rawConn) check(t *testing.T, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://a/", nil)
	resp, err := rc.cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "a" {
		t.Fatalf("%s: %s %d %q %v", what, resp.Proto, resp.StatusCode, body, err)
	}
}

// TestTLSShutdownDrainsHTTP1AndHTTP2: on shutdown a TLS listener stops
// taking connections, closes idle HTTP/1.1 ones, and lets requests in
// flight over HTTP/1.1 and HTTP/2 finish.
func TestTLSShutdownDrainsHTTP1AndHTTP2(t *testing.T) {
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	b := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
			io.WriteString(w, "done")
			return
		}
		io.WriteString(w, "a")
	})
	p := startProxy(t, withTLS(t, upstreamYAML("", b.addr())))
	addr := p.srv.Addr("web")

	idle := newRawConn(t, addr, false)
	idle.check(t, "the idle connection's first request")
	idleClosed := make(chan struct{})
	idle.cc.SetStateHook(func(cc *http.ClientConn) {
		if cc.Err() != nil {
			select {
			case <-idleClosed:
			default:
				close(idleClosed)
			}
		}
	})

	type result struct {
		proto string
		body  string
		err   error
	}
	results := make(chan result, 2)
	for _, h2 := range []bool{false, true} {
		c := httpsClient(t, h2)
		go func() {
			resp, err := c.Get("https://" + addr + "/slow")
			if err != nil {
				results <- result{err: err}
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.Proto, string(body), err}
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case r := <-results:
			t.Fatalf("a slow request ended before reaching the backend: %+v", r)
		case <-time.After(10 * time.Second):
			t.Fatal("the slow requests did not reach the backend")
		}
	}
	shut := make(chan struct{})
	go func() {
		p.srv.Shutdown()
		close(shut)
	}()
	// The idle connection is closed, new connections are refused.
	select {
	case <-idleClosed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle HTTP/1.1 connection is still open 10s into the shutdown")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("new connections are still accepted while shutting down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-shut:
		t.Fatal("shutdown finished while requests were in flight")
	default:
	}
	once.Do(func() { close(release) })
	for range 2 {
		if r := <-results; r.err != nil || r.body != "done" {
			t.Fatalf("in-flight request across shutdown: %+v", r)
		}
	}
	select {
	case <-shut:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not finish once the requests had")
	}
}

// TestGRPCStyleStreamOverTLS: an HTTP/2 client over TLS streams a request
// body to an h2c upstream and reads its answer as it comes, trailers
// included, as gRPC does.
func TestGRPCStyleStreamOverTLS(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	b := newBackendWith(t, "grpc", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			io.WriteString(w, "echo "+line)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("Grpc-Status", "0")
	}, func(s *http.Server) { s.Protocols = &protos })
	p := startProxy(t, withTLS(t, upstreamYAML("    protocol: h2c\n", b.addr())))
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", "https://"+p.srv.Addr("web")+"/svc.Echo/Stream", pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	// The first message goes with the request: the answer's header comes
	// with the first message back.
	msgs := []string{"one\n", "two\n"}
	go io.WriteString(pw, msgs[0])
	resp, err := httpsClient(t, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 {
		t.Fatalf("%s %d", resp.Proto, resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for i, msg := range msgs {
		// Each message comes back before the next is sent: both ways
		// stream.
		if i > 0 {
			io.WriteString(pw, msg)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != "echo "+msg {
			t.Fatalf("stream: %q, %v; want %q", line, err, "echo "+msg)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the stream: %q, %v", rest, err)
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Fatalf("trailer Grpc-Status %q, want 0", got)
	}
}
