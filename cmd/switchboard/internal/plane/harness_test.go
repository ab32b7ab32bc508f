package plane_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// proxy is a running data plane for one test.
type proxy struct {
	t   testing.TB
	srv *plane.Plane
	reg *prometheus.Registry
}

// startProxy parses yaml exactly as `switchboard serve` would and runs it.
// Listeners should use port 0; url() finds the bound port.
func startProxy(t testing.TB, yaml string) *proxy {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "switchboard.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config does not load:\n%v\n---\n%s", err, yaml)
	}
	useTestEngine(cfg)
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv := plane.New(log, reg)
	if err := srv.Apply(cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return &proxy{t: t, srv: srv, reg: reg}
}

func (p *proxy) url(listener string) string {
	a := p.srv.Addr(listener)
	if a == "" {
		p.t.Fatalf("no listener %q", listener)
	}
	return "http://" + a
}

// metric returns the value of a counter or gauge series (a histogram's
// sample count), 0 if absent.
func (p *proxy) metric(name string, labels map[string]string) float64 {
	p.t.Helper()
	m := p.series(name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// has reports whether a series of name whose labels include labels exists.
func (p *proxy) has(name string, labels map[string]string) bool {
	p.t.Helper()
	return p.series(name, labels) != nil
}

// series returns the first series of name whose labels include labels,
// or nil.
func (p *proxy) series(name string, labels map[string]string) *dto.Metric {
	p.t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// backend is a real HTTP server that names itself and counts connections.
type backend struct {
	*httptest.Server
	name  string
	conns atomic.Int64
}

func newBackend(t *testing.T, name string, h http.HandlerFunc) *backend {
	t.Helper()
	return newBackendWith(t, name, h, nil)
}

// newBackendWith is newBackend with a chance to configure the server first.
func newBackendWith(t *testing.T, name string, h http.HandlerFunc, configure func(*http.Server)) *backend {
	t.Helper()
	b := &backend{name: name}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, name)
		}
	}
	b.Server = httptest.NewUnstartedServer(h)
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}
	if configure != nil {
		configure(b.Config)
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

func (b *backend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string { return testutil.DeadAddr(t) }

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp, string(b)
}

// upstreamYAML renders a one-listener, one-upstream config.
func upstreamYAML(extraUpstream string, targets ...string) string {
	var b strings.Builder
	b.WriteString(`admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - match: {path_prefix: /}
        upstream: app
upstreams:
  app:
`)
	if extraUpstream != "" {
		b.WriteString(extraUpstream)
	}
	b.WriteString("    targets:\n")
	for _, t := range targets {
		if strings.HasPrefix(t, "{") {
			fmt.Fprintf(&b, "      - %s\n", t) // a whole target entry
		} else {
			fmt.Fprintf(&b, "      - {address: %s}\n", t)
		}
	}
	return b.String()
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and
// localhost and returns the PEM files' paths.
func writeSelfSigned(t testing.TB) (certFile, keyFile string) {
	return testutil.WriteKeyPair(t, t.TempDir(), "server")
}

// withTLS puts a self-signed certificate on the first listener of yaml
// (one listening on 127.0.0.1:0).
func withTLS(t testing.TB, yaml string) string {
	t.Helper()
	const at = "    listen: 127.0.0.1:0\n"
	if !strings.Contains(yaml, at) {
		t.Fatalf("no listener on 127.0.0.1:0 in\n%s", yaml)
	}
	cert, key := writeSelfSigned(t)
	return strings.Replace(yaml, at, at+"    tls: {cert_file: "+cert+", key_file: "+key+"}\n", 1)
}

// transport is how a test reaches a listener with raw HTTP/1.x bytes:
// over TCP, or over TLS with HTTP/1.1 chosen by ALPN.
type transport struct {
	name string
	tls  bool
}

var transports = []transport{{"cleartext", false}, {"tls", true}}

// configure returns yaml as it must be for this transport.
func (tr transport) configure(t testing.TB, yaml string) string {
	if tr.tls {
		return withTLS(t, yaml)
	}
	return yaml
}

// dial opens a connection to addr.
func (tr transport) dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	if !tr.tls {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return dialTLS(t, addr, "http/1.1")
}

// dialTLS opens a TLS connection to addr offering protos by ALPN, and
// checks that the first of them was chosen.
func dialTLS(t testing.TB, addr string, protos ...string) *tls.Conn {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: protos})
	if err != nil {
		t.Fatal(err)
	}
	if len(protos) > 0 && c.ConnectionState().NegotiatedProtocol != protos[0] {
		c.Close()
		t.Fatalf("ALPN chose %q, want %q", c.ConnectionState().NegotiatedProtocol, protos[0])
	}
	return c
}

// useTestEngine puts every http listener without tls of cfg that names
// no engine on the engine SWITCHBOARD_TEST_ENGINE names (eventloop), so
// that the proxy tests run against it unchanged; unset, listeners keep
// the engine they name. A test that names an engine gets that one. tcp
// listeners go on it too, where it can serve them (the event loop does
// not do tls_passthrough or proxy_protocol.accept).
func useTestEngine(cfg *config.Config) {
	e := os.Getenv("SWITCHBOARD_TEST_ENGINE")
	if e == "" {
		return
	}
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		if l.Engine != "" {
			continue
		}
		switch {
		case (l.Protocol == "" || l.Protocol == "http") && l.TLS == nil:
			l.Engine = e
		case l.Protocol == "tcp" && (e != config.EngineEventLoop || (!l.TLSPassthrough && (l.ProxyProtocol == nil || !l.ProxyProtocol.Accept))):
			l.Engine = e
		}
	}
}
