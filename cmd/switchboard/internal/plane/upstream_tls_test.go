package plane_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// tlsBackend is a real HTTPS server with a certificate of a test CA. It
// records what it saw of each request (protocol, TLS) and counts the
// connections it accepted and the full TLS handshakes it did.
type tlsBackend struct {
	*httptest.Server
	name       string
	conns      atomic.Int64
	handshakes atomic.Int64 // not resumed
	mu         sync.Mutex
	seen       []seenRequest
}

type seenRequest struct {
	proto, serverName, clientCN string
	tls                         bool
}

// newTLSBackend starts an HTTPS backend with a certificate for hosts from
// ca. protos are its ALPN protocols (h2 and http/1.1 by default); tune, if
// set, adjusts its TLS settings (to require a client certificate, say).
func newTLSBackend(t *testing.T, name string, ca *testutil.TestCA, protos []string, tune func(*tls.Config), hosts ...string) *tlsBackend {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	if protos == nil {
		protos = []string{"h2", "http/1.1"}
	}
	b := &tlsBackend{name: name}
	cert, _, _ := ca.Issue(t, name, hosts...)
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seenRequest{proto: r.Proto, tls: r.TLS != nil}
		if r.TLS != nil {
			s.serverName = r.TLS.ServerName
			if len(r.TLS.PeerCertificates) > 0 {
				s.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
			}
		}
		b.mu.Lock()
		b.seen = append(b.seen, s)
		b.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, name)
	}))
	b.EnableHTTP2 = true
	b.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: protos}
	if tune != nil {
		tune(b.TLS)
	}
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}
	b.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on purpose
	b.Config.TLSConfig = b.TLS
	b.TLS.VerifyConnection = func(cs tls.ConnectionState) error {
		if !cs.DidResume {
			b.handshakes.Add(1)
		}
		return nil
	}
	b.StartTLS()
	t.Cleanup(b.Close)
	return b
}

func (b *tlsBackend) addr() string { return strings.TrimPrefix(b.URL, "https://") }

// last returns what the backend saw of the last request.
func (b *tlsBackend) last(t *testing.T) seenRequest {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) == 0 {
		t.Fatalf("backend %s saw no request", b.name)
	}
	return b.seen[len(b.seen)-1]
}

func (b *tlsBackend) requests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seen)
}

func TestTLSUpstreamHTTP1KeepsOneConnection(t *testing.T) {
	ca := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", ca, []string{"http/1.1"}, nil)
	p := startProxy(t, upstreamYAML("    protocol: https\n    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	for i := range 20 {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if resp.StatusCode != 200 || body != "b1" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	s := b.last(t)
	if s.proto != "HTTP/1.1" || !s.tls {
		t.Fatalf("backend saw %s, TLS %v; want HTTP/1.1 over TLS", s.proto, s.tls)
	}
	if s.serverName != "" {
		t.Errorf("SNI %q sent for an IP endpoint; want none (IPs are not sent as SNI)", s.serverName)
	}
	if n := b.conns.Load(); n != 1 {
		t.Errorf("backend accepted %d connections for 20 sequential requests; want 1 (keep-alive over TLS)", n)
	}
	if n := b.handshakes.Load(); n != 1 {
		t.Errorf("backend did %d full handshakes; want 1", n)
	}
}

func TestTLSUpstreamHTTP2ByALPN(t *testing.T) {
	ca := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", ca, nil, nil)
	p := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	for i := range 20 {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if resp.StatusCode != 200 || body != "b1" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	s := b.last(t)
	if s.proto != "HTTP/2.0" || !s.tls {
		t.Fatalf("backend saw %s, TLS %v; want HTTP/2.0 over TLS (chosen by ALPN)", s.proto, s.tls)
	}
	// The connection that found out the endpoint speaks h2 is the one
	// HTTP/2 runs on: no second connection, no second handshake.
	if n := b.conns.Load(); n != 1 {
		t.Errorf("backend accepted %d connections; want 1 (HTTP/2 multiplexed on the first)", n)
	}
	// A POST with a body goes over HTTP/2 too.
	resp, err := http.Post(p.url("web")+"/post", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || b.last(t).proto != "HTTP/2.0" {
		t.Fatalf("POST: %d, backend saw %s", resp.StatusCode, b.last(t).proto)
	}
}

func TestTLSUpstreamProtocolHTTP1ForcesHTTP11(t *testing.T) {
	ca := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", ca, nil, nil) // offers h2
	p := startProxy(t, upstreamYAML("    protocol: http1\n    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
	if resp.StatusCode != 200 || body != "b1" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if s := b.last(t); s.proto != "HTTP/1.1" || !s.tls {
		t.Fatalf("backend saw %s, TLS %v; want HTTP/1.1 over TLS", s.proto, s.tls)
	}
}

func TestTLSUpstreamWrongCAIsConnectFailure(t *testing.T) {
	ca, other := testutil.NewTestCA(t), testutil.NewTestCA(t)
	bad := newTLSBackend(t, "bad", other, nil, nil) // not signed by ca
	good := newTLSBackend(t, "good", ca, nil, nil)

	t.Run("alone", func(t *testing.T) {
		p := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n", bad.addr()))
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if resp.StatusCode != http.StatusBadGateway || errorCode(t, body) != "upstream_connect_failed" {
			t.Fatalf("got %d %s; want 502 upstream_connect_failed", resp.StatusCode, body)
		}
		if got := p.metric("switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": bad.addr(), "kind": "tls"}); got != 1 {
			t.Errorf("upstream errors of kind tls = %v; want 1", got)
		}
		if bad.requests() != 0 {
			t.Errorf("the unverified backend got %d requests", bad.requests())
		}
	})
	t.Run("retried on another endpoint", func(t *testing.T) {
		// round_robin alternates: half the requests pick bad first, fail
		// its handshake and go to good.
		p := startProxy(t, upstreamYAML("    health: {passive: {enabled: false}}\n    tls: {ca_file: "+ca.CAFile+"}\n", bad.addr(), good.addr()))
		for i := range 6 {
			resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
			if resp.StatusCode != 200 || body != "good" {
				t.Fatalf("request %d: %d %q; want 200 from good", i, resp.StatusCode, body)
			}
		}
		if got := p.metric("switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": bad.addr(), "kind": "tls"}); got < 1 {
			t.Errorf("upstream errors of kind tls = %v; want at least 1", got)
		}
		if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "connect_failure"}); got < 1 {
			t.Errorf("connect_failure retries = %v; want at least 1 (a failed handshake sent nothing)", got)
		}
	})
}

func TestTLSUpstreamClientCertificate(t *testing.T) {
	ca := testutil.NewTestCA(t)
	requireCert := func(c *tls.Config) {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = ca.Pool
	}
	b := newTLSBackend(t, "b1", ca, nil, requireCert)
	_, certFile, keyFile := ca.Issue(t, "switchboard-proxy")

	without := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	resp, body := get(t, http.DefaultClient, without.url("web")+"/x")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("without a client certificate: %d %s; want 502", resp.StatusCode, body)
	}
	if b.requests() != 0 {
		t.Fatalf("the backend served %d requests to a proxy without a certificate", b.requests())
	}

	with := startProxy(t, upstreamYAML(fmt.Sprintf("    tls: {ca_file: %s, cert_file: %s, key_file: %s}\n", ca.CAFile, certFile, keyFile), b.addr()))
	resp, body = get(t, http.DefaultClient, with.url("web")+"/x")
	if resp.StatusCode != 200 || body != "b1" {
		t.Fatalf("with a client certificate: %d %q", resp.StatusCode, body)
	}
	if cn := b.last(t).clientCN; cn != "switchboard-proxy" {
		t.Fatalf("backend saw client certificate %q; want switchboard-proxy", cn)
	}
}

func TestTLSUpstreamServerName(t *testing.T) {
	ca := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", ca, []string{"http/1.1"}, nil, "orders.internal") // no IP in the certificate

	p := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	if resp, body := get(t, http.DefaultClient, p.url("web")+"/x"); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("IP endpoint, certificate for a name, no server_name: %d %s; want 502", resp.StatusCode, body)
	}

	p = startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+", server_name: orders.internal}\n", b.addr()))
	resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
	if resp.StatusCode != 200 || body != "b1" {
		t.Fatalf("with server_name: %d %q", resp.StatusCode, body)
	}
	if sn := b.last(t).serverName; sn != "orders.internal" {
		t.Fatalf("backend saw SNI %q; want orders.internal", sn)
	}
}

func TestTLSUpstreamInsecureSkipVerify(t *testing.T) {
	other := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", other, nil, nil)
	path := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(upstreamYAML("    tls: {insecure_skip_verify: true}\n", b.addr())), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	var mu sync.Mutex
	srv := plane.New(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil)), prometheus.NewRegistry())
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	resp, body := get(t, http.DefaultClient, "http://"+srv.Addr("web")+"/x")
	if resp.StatusCode != 200 || body != "b1" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "level=WARN msg=\"upstream TLS certificates are not verified (tls.insecure_skip_verify)\" upstream=app") {
		t.Fatalf("no warning about insecure_skip_verify in the log:\n%s", logged.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestTLSUpstreamSessionResumption(t *testing.T) {
	ca := testutil.NewTestCA(t)
	b := newTLSBackend(t, "b1", ca, []string{"http/1.1"}, nil)
	// No idle connections kept: every request dials, and all but the
	// first resume the session.
	p := startProxy(t, upstreamYAML("    max_idle_per_endpoint: 0\n    tls: {ca_file: "+ca.CAFile+"}\n", b.addr()))
	for i := range 5 {
		if resp, body := get(t, http.DefaultClient, p.url("web")+"/x"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if c := b.conns.Load(); c != 5 {
		t.Fatalf("backend accepted %d connections; want 5 (none kept idle)", c)
	}
	if n := b.handshakes.Load(); n != 1 {
		t.Fatalf("backend did %d full handshakes over 5 connections; want 1, the rest resumed", n)
	}
}

func TestTLSUpstreamActiveHealthChecks(t *testing.T) {
	ca, other := testutil.NewTestCA(t), testutil.NewTestCA(t)
	var failing atomic.Bool
	var checksOverTLS atomic.Int64
	cert, _, _ := ca.Issue(t, "checked", "127.0.0.1")
	checked := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if r.TLS != nil {
				checksOverTLS.Add(1)
			}
			if failing.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "checked")
	}))
	checked.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	checked.Config.ErrorLog = log.New(io.Discard, "", 0)
	checked.StartTLS()
	t.Cleanup(checked.Close)
	addr := strings.TrimPrefix(checked.URL, "https://")
	untrusted := newTLSBackend(t, "untrusted", other, nil, nil)

	for _, typ := range []string{"http", "tcp"} {
		t.Run(typ, func(t *testing.T) {
			// The http check starts failing, so that its endpoint's way
			// back to healthy is the checks' doing.
			failing.Store(typ == "http")
			active := fmt.Sprintf("      active: {type: %s, path: /healthz, interval: 50ms, allow_fast: true, timeout: 40ms, rise: 1, fall: 1, jitter: 0}\n", typ)
			p := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n    health:\n"+active, addr, untrusted.addr()))
			// A certificate that does not verify fails the check (http: the
			// request cannot be sent; tcp: the handshake is part of it, so
			// that an endpoint the proxy cannot use is not healthy).
			p.waitState(untrusted.addr(), 5*time.Second, endpoint.Unhealthy)
			if typ == "tcp" {
				if st := p.endpointOf(addr).Status(); st.State != endpoint.Healthy {
					t.Fatalf("trusted endpoint under a TLS tcp check: %v", st)
				}
				return
			}
			p.waitState(addr, 5*time.Second, endpoint.Unhealthy)
			failing.Store(false)
			p.waitState(addr, 5*time.Second, endpoint.Healthy)
			if checksOverTLS.Load() == 0 {
				t.Fatal("no health check reached the backend over TLS")
			}
		})
	}
}

func TestTLSUpstreamReloadKeepsConnectionsAndReadsNewFiles(t *testing.T) {
	ca, next := testutil.NewTestCA(t), testutil.NewTestCA(t)
	b1 := newTLSBackend(t, "b1", ca, []string{"http/1.1"}, nil)
	b2 := newTLSBackend(t, "b2", next, []string{"http/1.1"}, nil)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "upstream-ca.pem")
	testutil.CopyFile(t, ca.CAFile, caFile)
	// No passive ejection: the endpoint that fails its handshakes now is
	// the one that must serve after the reload.
	yaml := upstreamYAML("    health: {passive: {enabled: false}}\n    tls: {ca_file: "+caFile+"}\n", b1.addr(), b2.addr())
	p := startProxy(t, yaml)
	apply := func() {
		t.Helper()
		path := filepath.Join(dir, "switchboard.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatal(err)
		}
	}
	served := func() map[string]int {
		m := map[string]int{}
		for range 4 {
			_, body := get(t, http.DefaultClient, p.url("web")+"/x")
			m[body]++
		}
		return m
	}
	if m := served(); m["b1"] != 4 {
		t.Fatalf("before the reload: %v; want every request on b1 (b2's CA is not trusted)", m)
	}
	apply() // nothing changed
	served()
	if n := b1.conns.Load(); n != 1 {
		t.Fatalf("b1 accepted %d connections across a reload that changed nothing; want 1", n)
	}
	// The CA file now holds the other CA: a reload reads it again.
	testutil.CopyFile(t, next.CAFile, caFile)
	apply()
	if m := served(); m["b2"] != 4 {
		t.Fatalf("after the CA file changed: %v; want every request on b2", m)
	}
}

func TestTLSUpstreamProtocolSwitchGoesOverHTTP11(t *testing.T) {
	ca := testutil.NewTestCA(t)
	cert, _, _ := ca.Issue(t, "ws", "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.WriteString(w, r.Proto)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "cannot switch over "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(brw, buf); err == nil {
			c.Write(buf)
		}
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := startProxy(t, upstreamYAML("    tls: {ca_file: "+ca.CAFile+"}\n", strings.TrimPrefix(srv.URL, "https://")))
	// The endpoint is known to speak HTTP/2 first.
	if _, body := get(t, http.DefaultClient, p.url("web")+"/"); body != "HTTP/2.0" {
		t.Fatalf("plain request reached the endpoint over %q; want HTTP/2.0", body)
	}
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %d %s; want 101 (a protocol switch goes over HTTP/1.1)", resp.StatusCode, b)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tunnel: %q, %v", buf, err)
	}
}

func TestTLSUpstreamHandshakeTimeoutIsConnectFailure(t *testing.T) {
	ca := testutil.NewTestCA(t)
	good := newTLSBackend(t, "good", ca, nil, nil)
	// A port that accepts connections and never answers a ClientHello.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	p := startProxy(t, upstreamYAML("    timeouts: {connect: 300ms}\n    health: {passive: {enabled: false}}\n    tls: {ca_file: "+ca.CAFile+"}\n",
		mute.Addr().String(), good.addr()))
	for i := range 4 {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if resp.StatusCode != 200 || body != "good" {
			t.Fatalf("request %d: %d %q; want good after the mute endpoint's handshake timed out", i, resp.StatusCode, body)
		}
	}
	if got := p.metric("switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": mute.Addr().String(), "kind": "tls"}); got < 1 {
		t.Errorf("upstream errors of kind tls at the mute endpoint = %v; want at least 1", got)
	}
}

// An endpoint that chose HTTP/2 and comes back speaking only HTTP/1.1
// (a restart with other settings) is served all the same, and from then on
// over the HTTP/1 engine.
func TestTLSUpstreamEndpointThatDropsHTTP2(t *testing.T) {
	ca := testutil.NewTestCA(t)
	cert, _, _ := ca.Issue(t, "b", "127.0.0.1")
	protos := make(chan string, 100)
	serve := func(ln net.Listener, alpn ...string) *http.Server {
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				protos <- r.Proto
				io.WriteString(w, "b")
			}),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: alpn},
			ErrorLog:  log.New(io.Discard, "", 0),
		}
		if len(alpn) == 1 {
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // no HTTP/2
		}
		go srv.ServeTLS(ln, "", "")
		return srv
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := serve(ln, "h2", "http/1.1")
	p := startProxy(t, upstreamYAML("    health: {passive: {enabled: false}}\n    tls: {ca_file: "+ca.CAFile+"}\n", addr))
	if resp, _ := get(t, http.DefaultClient, p.url("web")+"/"); resp.StatusCode != 200 || <-protos != "HTTP/2.0" {
		t.Fatal("the first server was not reached over HTTP/2")
	}
	first.Close()
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	second := serve(ln, "http/1.1")
	t.Cleanup(func() { second.Close() })
	// A request may still meet the HTTP/2 connection the first server
	// closed, before the proxy has read that it is gone (as with h2c); the
	// next one dials, and finds HTTP/1.1.
	testutil.WaitFor(t, 5*time.Second, "a request served by the restarted endpoint", func() bool {
		resp, _ := get(t, http.DefaultClient, p.url("web")+"/")
		return resp.StatusCode == 200
	})
	if proto := <-protos; proto != "HTTP/1.1" {
		t.Fatalf("the restarted endpoint was reached over %s", proto)
	}
	for i := range 5 {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/")
		if resp.StatusCode != 200 || body != "b" {
			t.Fatalf("request %d after the restart: %d %q", i, resp.StatusCode, body)
		}
		if proto := <-protos; proto != "HTTP/1.1" {
			t.Fatalf("request %d after the restart reached the endpoint over %s", i, proto)
		}
	}
	if open := p.upstream("app").ConnStats()[addr][0]; open != 1 {
		t.Errorf("the HTTP/1 engine has %d connections to the endpoint; want 1 (its requests moved there)", open)
	}
}
