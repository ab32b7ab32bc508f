package plane_test

// Listener TLS: certificates chosen by SNI, client certificates, TLS
// versions and suites, HSTS, certificate files reloaded when they change;
// and on cleartext listeners h2c with prior knowledge and redirect_https.

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// withListenerTLS puts tls (a YAML block at the listener's indentation,
// "tls:" included) and any other listener keys on the first listener of
// yaml.
func withListenerTLS(t *testing.T, yaml, block string) string {
	t.Helper()
	const at = "    listen: 127.0.0.1:0\n"
	if !strings.Contains(yaml, at) {
		t.Fatalf("no listener on 127.0.0.1:0 in\n%s", yaml)
	}
	return strings.Replace(yaml, at, at+block, 1)
}

// handshake connects to addr with conf (server name sni) and returns the
// connection's state, or the handshake's error.
func handshake(addr, sni string, conf *tls.Config) (tls.ConnectionState, error) {
	conf = conf.Clone()
	conf.ServerName = sni
	if conf.RootCAs == nil {
		conf.InsecureSkipVerify = true
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	return c.ConnectionState(), nil
}

// TestSNIChoosesTheCertificateByName: each handshake gets the certificate
// whose DNS names match its server name, an exact name before a wildcard
// listed earlier, a wildcard for one label only, and the first
// certificate when nothing matches or no name is sent.
func TestSNIChoosesTheCertificateByName(t *testing.T) {
	b := newBackend(t, "a", nil)
	ca := testutil.NewCA(t, "test CA")
	dir := t.TempDir()
	var certs strings.Builder
	for _, c := range []struct {
		name  string
		names []string
	}{{"default", []string{"default.test"}}, {"wild", []string{"*.example.com"}}, {"exact", []string{"a.example.com", "www.a.example.com"}}} {
		cf, kf := ca.Server(t, dir, c.name, c.names...)
		fmt.Fprintf(&certs, "        - {cert_file: %s, key_file: %s}\n", cf, kf)
	}
	p := startProxy(t, withListenerTLS(t, upstreamYAML("", b.addr()), "    tls:\n      certificates:\n"+certs.String()))
	addr := p.srv.Addr("web")
	for _, tc := range []struct{ sni, want string }{
		{"", "default"},
		{"default.test", "default"},
		{"a.example.com", "exact"},
		{"A.Example.COM", "exact"},
		{"www.a.example.com", "exact"},
		{"b.example.com", "wild"},
		{"x.b.example.com", "default"},
		{"example.com", "default"},
		{"other.test", "default"},
	} {
		cs, err := handshake(addr, tc.sni, &tls.Config{})
		if err != nil {
			t.Fatalf("server name %q: %v", tc.sni, err)
		}
		if got := cs.PeerCertificates[0].Subject.CommonName; got != tc.want {
			t.Errorf("server name %q got certificate %q, want %q", tc.sni, got, tc.want)
		}
	}
	// A client that verifies the name is served through it.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "b.example.com"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, body := get(t, &http.Client{Transport: tr, Timeout: 10 * time.Second}, "https://"+addr+"/")
	if resp.StatusCode != 200 || body != "a" || resp.Proto != "HTTP/2.0" {
		t.Fatalf("verified request to b.example.com: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}

// TestClientCertificatesAreVerified: with client_auth require a client
// without a certificate, or with one of another CA, fails the handshake,
// and one with a good certificate is served, its subject in
// client_cert_header (a client's own header of that name never reaches
// the upstream); with verify_if_given a client without one is served,
// without the header.
func TestClientCertificatesAreVerified(t *testing.T) {
	b := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "subject=%q", r.Header.Values("X-Client-Cert-Subject"))
	})
	servers, clients, strangers := testutil.NewCA(t, "servers"), testutil.NewCA(t, "clients"), testutil.NewCA(t, "strangers")
	dir := t.TempDir()
	cf, kf := servers.Server(t, dir, "server", "localhost")
	caFile := clients.WriteCert(t, dir, "clients")
	good := clients.Client(t, pkix.Name{CommonName: "alice", Organization: []string{"Example"}})
	bad := strangers.Client(t, pkix.Name{CommonName: "mallory"})

	for _, mode := range []string{"require", "verify_if_given"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, withListenerTLS(t, upstreamYAML("", b.addr()), fmt.Sprintf(
				"    tls:\n      cert_file: %s\n      key_file: %s\n      client_ca_file: %s\n      client_auth: %s\n      client_cert_header: X-Client-Cert-Subject\n",
				cf, kf, caFile, mode)))
			addr := p.srv.Addr("web")
			call := func(h2 bool, cert *tls.Certificate) (string, error) {
				conf := &tls.Config{RootCAs: servers.Pool(), ServerName: "localhost"}
				if cert != nil {
					conf.Certificates = []tls.Certificate{*cert}
				}
				tr := &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: h2}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				defer tr.CloseIdleConnections()
				req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
				req.Header.Set("X-Client-Cert-Subject", "CN=admin")
				resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if resp.Proto != protoName(h2) {
					t.Errorf("%s request answered over %s", protoName(h2), resp.Proto)
				}
				return fmt.Sprintf("%d %s", resp.StatusCode, body), err
			}
			// refusal sends a request on a connection presenting cert
			// whatever CAs the server asks for, and returns the error
			// that ends it (with TLS 1.3 the client learns of the
			// refusal at its first read).
			refusal := func(cert *tls.Certificate) error {
				conf := &tls.Config{RootCAs: servers.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"},
					GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
						if cert == nil {
							return &tls.Certificate{}, nil
						}
						return cert, nil
					}}
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
				_, err = c.Read(make([]byte, 1))
				return err
			}
			for _, h2 := range []bool{false, true} {
				got, err := call(h2, &good)
				if want := `200 subject=["CN=alice,O=Example"]`; err != nil || got != want {
					t.Errorf("%s with a good certificate: %q, %v; want %q", protoName(h2), got, err, want)
				}
				if mode == "verify_if_given" {
					got, err = call(h2, nil)
					if want := `200 subject=[]`; err != nil || got != want {
						t.Errorf("%s without a certificate: %q, %v; want %q", protoName(h2), got, err, want)
					}
				}
			}
			if err := refusal(&bad); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
				t.Errorf("with a certificate of another CA: %v; want the handshake refused (unknown certificate authority)", err)
			}
			if err := refusal(&good); err != nil {
				t.Errorf("the refusal test's own client, with a good certificate: %v", err)
			}
			if err := refusal(nil); mode == "require" && (err == nil || !strings.Contains(err.Error(), "certificate required")) {
				t.Errorf("without a certificate: %v; want the handshake refused (certificate required)", err)
			}
		})
	}
}

// TestTLSVersionsSuitesAndALPN: the default minimum refuses TLS 1.1,
// min_version 1.3 refuses 1.2, cipher_suites refuses a client without
// one of them, and alpn [http/1.1] keeps an HTTP/2 client on HTTP/1.1.
func TestTLSVersionsSuitesAndALPN(t *testing.T) {
	b := newBackend(t, "a", nil)
	cert, key := writeSelfSigned(t)
	const chacha, aes = tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
	yaml := fmt.Sprintf(`admin: {enabled: false}
listeners:
  - name: default
    listen: 127.0.0.1:0
    tls: {cert_file: %[1]s, key_file: %[2]s}
    routes: [{upstream: app}]
  - name: tls13
    listen: 127.0.0.1:0
    tls: {cert_file: %[1]s, key_file: %[2]s, min_version: "1.3"}
    routes: [{upstream: app}]
  - name: chacha
    listen: 127.0.0.1:0
    tls: {cert_file: %[1]s, key_file: %[2]s, cipher_suites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]}
    routes: [{upstream: app}]
  - name: h1only
    listen: 127.0.0.1:0
    tls: {cert_file: %[1]s, key_file: %[2]s, alpn: [http/1.1]}
    routes: [{upstream: app}]
upstreams:
  app:
    targets: [{address: %[3]s}]
`, cert, key, b.addr())
	p := startProxy(t, yaml)
	v := func(min, max uint16, suites ...uint16) *tls.Config {
		return &tls.Config{MinVersion: min, MaxVersion: max, CipherSuites: suites}
	}
	for _, tc := range []struct {
		listener string
		conf     *tls.Config
		refused  string // part of the error, or "" for a handshake that succeeds
	}{
		{"default", v(tls.VersionTLS10, tls.VersionTLS11), "protocol version"},
		{"default", v(tls.VersionTLS12, tls.VersionTLS12), ""},
		{"default", v(tls.VersionTLS13, tls.VersionTLS13), ""},
		{"tls13", v(tls.VersionTLS12, tls.VersionTLS12), "protocol version"},
		{"tls13", v(tls.VersionTLS13, tls.VersionTLS13), ""},
		{"chacha", v(tls.VersionTLS12, tls.VersionTLS12, aes), "handshake failure"},
		{"chacha", v(tls.VersionTLS12, tls.VersionTLS12, aes, chacha), ""},
	} {
		cs, err := handshake(p.srv.Addr(tc.listener), "", tc.conf)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s, client TLS %x-%x: refused: %v", tc.listener, tc.conf.MinVersion, tc.conf.MaxVersion, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s, client TLS %x-%x suites %x: %v; want it refused (%s)", tc.listener, tc.conf.MinVersion, tc.conf.MaxVersion, tc.conf.CipherSuites, err, tc.refused)
		case tc.listener == "chacha" && err == nil && cs.CipherSuite != chacha:
			t.Errorf("chacha listener negotiated %s", tls.CipherSuiteName(cs.CipherSuite))
		}
	}
	resp, body := get(t, httpsClient(t, true), "https://"+p.srv.Addr("h1only")+"/")
	if resp.Proto != "HTTP/1.1" || body != "a" {
		t.Errorf("alpn [http/1.1], HTTP/2 client: %s %q; want HTTP/1.1", resp.Proto, body)
	}
}

// TestHSTSOnEveryResponse: a TLS listener with hsts sends its
// Strict-Transport-Security on upstream answers (over the upstream's
// own), on the proxy's own errors (404 no_route), over HTTP/1.1 and
// HTTP/2.
func TestHSTSOnEveryResponse(t *testing.T) {
	b := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/app/own" {
			w.Header().Set("Strict-Transport-Security", "max-age=5")
		}
		io.WriteString(w, "a")
	})
	yaml := strings.Replace(withTLS(t, upstreamYAML("", b.addr())), "match: {path_prefix: /}", "match: {path_prefix: /app}", 1)
	yaml = strings.Replace(yaml, "    tls: {", "    tls: {hsts: {max_age: 1h, include_subdomains: true}, ", 1)
	p := startProxy(t, yaml)
	const want = "max-age=3600; includeSubDomains"
	for _, h2 := range []bool{false, true} {
		c := httpsClient(t, h2)
		for _, tc := range []struct {
			path   string
			status int
		}{{"/app", 200}, {"/app/own", 200}, {"/elsewhere", 404}} {
			resp, _ := get(t, c, "https://"+p.srv.Addr("web")+tc.path)
			if resp.StatusCode != tc.status || resp.Header.Values("Strict-Transport-Security")[0] != want || len(resp.Header.Values("Strict-Transport-Security")) != 1 {
				t.Errorf("%s %s: %d, Strict-Transport-Security %q; want %d with %q", resp.Proto, tc.path, resp.StatusCode, resp.Header.Values("Strict-Transport-Security"), tc.status, want)
			}
		}
	}
}

// TestRedirectHTTPSAnswersEveryRequest: a listener with redirect_https
// answers every method with 308 to the same path and query over https
// (on redirect_https_port when set), counts it on its no-route series,
// and answers a request without a host with 400.
func TestRedirectHTTPSAnswersEveryRequest(t *testing.T) {
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: port
    listen: 127.0.0.1:0
    redirect_https: true
    redirect_https_port: 8443
  - name: plain
    listen: 127.0.0.1:0
    redirect_https: true
`)
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		listener, method, host, target, want string
	}{
		{"port", "GET", "example.com:8080", "/a/b?x=1&y=%20z", "https://example.com:8443/a/b?x=1&y=%20z"},
		{"port", "POST", "example.com", "/form", "https://example.com:8443/form"},
		{"plain", "GET", "Example.com:80", "/a%2Fb/", "https://Example.com/a%2Fb/"},
		{"plain", "DELETE", "[::1]:80", "/x", "https://[::1]/x"},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+p.srv.Addr(tc.listener)+tc.target, strings.NewReader("body"))
		req.Host = tc.host
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 308 || resp.Header.Get("Location") != tc.want {
			t.Errorf("%s %s%s on %s: %d Location %q; want 308 %q", tc.method, tc.host, tc.target, tc.listener, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
	}
	if n := p.metric("switchboard_http_requests_total", map[string]string{"listener": "port", "route": "", "code": "308"}); n != 2 {
		t.Errorf("listener port counted %v redirects, want 2", n)
	}
	if resp := rawExchange(t, p.srv.Addr("plain"), "GET / HTTP/1.0\r\n\r\n"); !strings.HasPrefix(resp, "HTTP/1.1 400 ") {
		t.Errorf("a request without a host: %q, want 400", resp)
	}
}

// TestH2CPriorKnowledgeCarriesGRPC: a grpc-go client speaking cleartext
// HTTP/2 to a listener (h2c on by default) reaches a grpc-go backend
// through an h2c upstream: a unary call, a server stream whose messages
// come as the backend sends them, and a bidirectional stream. With h2c
// off the call fails and HTTP/1 is served as before.
func TestH2CPriorKnowledgeCarriesGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.RegisterV1(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	p := startProxy(t, upstreamYAML("    protocol: h2c\n", ln.Addr().String()))
	cc, err := grpc.NewClient(p.srv.Addr("web"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)

	// Unary.
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary Check through the proxy: %v, %v; want SERVING", resp, err)
	}

	// Server stream: each status change arrives while the stream is open.
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVICE_UNKNOWN, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING} {
		if st != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
			hs.SetServingStatus("orders", st)
		}
		m, err := watch.Recv()
		if err != nil || m.GetStatus() != st {
			t.Fatalf("Watch stream: got %v, %v; want %v", m, err, st)
		}
	}

	// Bidirectional stream: each answer comes before the next request.
	refl, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		m, err := refl.Recv()
		if err != nil || len(m.GetListServicesResponse().GetService()) != 2 {
			t.Fatalf("reflection stream: %v, %v; want the two services", m, err)
		}
	}
	refl.CloseSend()
	if _, err := refl.Recv(); err != io.EOF {
		t.Fatalf("reflection stream end: %v, want EOF", err)
	}

	// h2c off: the preface is refused, HTTP/1 goes on.
	off := startProxy(t, strings.Replace(upstreamYAML("    protocol: h2c\n", ln.Addr().String()), "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    h2c: false\n", 1))
	cc2, err := grpc.NewClient(off.srv.Addr("web"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := healthpb.NewHealthClient(cc2).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("gRPC over h2c worked with h2c: false")
	}
	if resp := rawExchange(t, off.srv.Addr("web"), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); !strings.HasPrefix(resp, "HTTP/1.1 505 ") {
		t.Fatalf("preface with h2c off: %q, want 505", resp)
	}
}

// TestCertificateFilesReloadWhenTheyChange: a certificate replaced on
// disk (renamed over the old file, as cert-manager and editors do, or by
// a Kubernetes-style "..data" symlink swap) is served to new handshakes
// without a configuration reload; a file that no longer loads keeps the
// certificate in use and is counted as an error.
func TestCertificateFilesReloadWhenTheyChange(t *testing.T) {
	b := newBackend(t, "a", nil)
	ca := testutil.NewCA(t, "test CA")
	serial := func(t *testing.T, addr string) *big.Int {
		t.Helper()
		cs, err := handshake(addr, "localhost", &tls.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return cs.PeerCertificates[0].SerialNumber
	}
	// issue writes a new certificate under dir as site.crt and site.key
	// and returns its serial.
	issue := func(t *testing.T, dir string) *big.Int {
		cf, _ := ca.Server(t, dir, "site", "localhost")
		c, err := tls.LoadX509KeyPair(cf, filepath.Join(dir, "site.key"))
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber
	}
	waitFor := func(t *testing.T, addr string, want *big.Int, what string) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, what, func() bool { return serial(t, addr).Cmp(want) == 0 })
	}

	t.Run("rename", func(t *testing.T) {
		dir, next := t.TempDir(), t.TempDir()
		first := issue(t, dir)
		yaml := withListenerTLS(t, upstreamYAML("", b.addr()), fmt.Sprintf("    tls: {cert_file: %s/site.crt, key_file: %s/site.key}\n", dir, dir))
		p := startProxy(t, yaml)
		addr := p.srv.Addr("web")
		if got := serial(t, addr); got.Cmp(first) != 0 {
			t.Fatalf("serial %v, want the first certificate's %v", got, first)
		}
		// A configuration reload that keeps the files keeps their watch
		// (as do the reloads auto routes make).
		cfg, err := config.Parse("same.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		second := issue(t, next)
		for _, f := range []string{"site.key", "site.crt"} {
			if err := os.Rename(filepath.Join(next, f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, addr, second, "the renamed certificate to be served")
		labels := map[string]string{"listener": "web", "result": "error"}
		errorsBefore := p.metric("switchboard_tls_certificate_reloads_total", labels)
		if ok := p.metric("switchboard_tls_certificate_reloads_total", map[string]string{"listener": "web", "result": "ok"}); ok < 1 {
			t.Errorf("reloads counted ok: %v, want at least 1", ok)
		}

		// A half-written certificate: the one in use stays.
		if err := os.WriteFile(filepath.Join(dir, "site.crt"), []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "the bad certificate to be counted", func() bool {
			return p.metric("switchboard_tls_certificate_reloads_total", labels) > errorsBefore
		})
		if got := serial(t, addr); got.Cmp(second) != 0 {
			t.Fatalf("after a bad write: serial %v, want the last good one %v", got, second)
		}
	})

	t.Run("symlink swap", func(t *testing.T) {
		dir := t.TempDir()
		// dir/site.crt -> ..data/site.crt, ..data -> ..v1, as a
		// Kubernetes secret volume lays them out.
		v1 := filepath.Join(dir, "..v1")
		if err := os.Mkdir(v1, 0o700); err != nil {
			t.Fatal(err)
		}
		first := issue(t, v1)
		must(t, os.Symlink("..v1", filepath.Join(dir, "..data")))
		for _, f := range []string{"site.crt", "site.key"} {
			must(t, os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)))
		}
		p := startProxy(t, withListenerTLS(t, upstreamYAML("", b.addr()), fmt.Sprintf("    tls: {cert_file: %s/site.crt, key_file: %s/site.key}\n", dir, dir)))
		addr := p.srv.Addr("web")
		if got := serial(t, addr); got.Cmp(first) != 0 {
			t.Fatalf("serial %v, want the first certificate's %v", got, first)
		}
		v2 := filepath.Join(dir, "..v2")
		must(t, os.Mkdir(v2, 0o700))
		second := issue(t, v2)
		must(t, os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
		must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		waitFor(t, addr, second, "the certificate behind the swapped symlink to be served")
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// client_cert_header is the proxy's word on the client's certificate, so
// a client's own value of it (or of an alias with underscores, which
// CGI-style upstreams read as the same header) must be gone before
// anything reads it: the routes' header matches and forward_auth's
// request, not only the upstream's request. A subject with control
// characters (a CA may sign a name it was given) goes escaped, never as
// a line of its own.
func TestClientCertHeaderCannotBeSpoofedBeforeRoutingOrForwardAuth(t *testing.T) {
	var s seen
	app := newBackend(t, "app", s.handler("app"))
	admin := newBackend(t, "admin", s.handler("admin"))
	auth := &authService{}
	as := newBackend(t, "auth", auth.ServeHTTP)
	servers, clients := testutil.NewCA(t, "servers"), testutil.NewCA(t, "clients")
	dir := t.TempDir()
	cf, kf := servers.Server(t, dir, "server", "localhost")
	caFile := clients.WriteCert(t, dir, "clients")
	p := startProxy(t, fmt.Sprintf(`admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    tls: {cert_file: %s, key_file: %s, client_ca_file: %s, client_auth: verify_if_given, client_cert_header: X-Client-Cert-Subject}
    routes:
      - match: {path_prefix: /, headers: {X-Client-Cert-Subject: "CN=admin"}}
        upstream: admin
      - match: {path_prefix: /}
        upstream: app
        forward_auth: {url: "http://%s/check", copy_response_headers: [X-User]}
upstreams:
  app:
    targets: [{address: %s}]
  admin:
    targets: [{address: %s}]
`, cf, kf, caFile, as.addr(), app.addr(), admin.addr()))
	addr := p.srv.Addr("web")
	call := func(cert *tls.Certificate) (int, string) {
		conf := &tls.Config{RootCAs: servers.Pool(), ServerName: "localhost"}
		if cert != nil {
			conf.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: conf}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
		req.Header.Set("X-Client-Cert-Subject", "CN=admin")
		req.Header["X_Client_Cert_Subject"] = []string{"CN=admin"}
		req.Header.Set("Cookie", "session=good")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	aliases := func(h http.Header) []string {
		var out []string
		for k, v := range h {
			if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "X-Client-Cert-Subject") {
				out = append(out, k+": "+strings.Join(v, ","))
			}
		}
		slices.Sort(out)
		return out
	}

	if status, body := call(nil); status != 200 || body != "app" {
		t.Errorf("without a certificate, claiming CN=admin: %d %q; want 200 from app, not the admin route", status, body)
	}
	if got := aliases(auth.header()); len(got) != 0 {
		t.Errorf("without a certificate, the auth service saw %q; want none", got)
	}
	if got := aliases(s.header()); len(got) != 0 {
		t.Errorf("without a certificate, the upstream saw %q; want none", got)
	}

	odd := clients.Client(t, pkix.Name{CommonName: "bob\r\nX-Injected: 1"})
	if status, body := call(&odd); status != 200 || body != "app" {
		t.Errorf("with a certificate: %d %q", status, body)
	}
	want := []string{`X-Client-Cert-Subject: CN=bob\0D\0AX-Injected: 1`} // RFC 4514 hex escapes
	if got := aliases(auth.header()); !slices.Equal(got, want) {
		t.Errorf("with a certificate, the auth service saw %q; want %q", got, want)
	}
	if got := aliases(s.header()); !slices.Equal(got, want) || s.header().Get("X-Injected") != "" {
		t.Errorf("with a certificate, the upstream saw %q (X-Injected %q); want %q", got, s.header().Get("X-Injected"), want)
	}
}
