package config

import (
	"runtime"
	"strings"
	"testing"
)

// TestEngineProblemsArePlaced: an unknown engine, the event loop on a TLS
// listener, and on a tcp listener with tls_passthrough or
// proxy_protocol.accept, are reported at their value; on a system other
// than Linux the event loop is refused too.
func TestEngineProblemsArePlaced(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir, "a")
	src := strings.NewReplacer("CERT", cert, "KEY", key).Replace(`listeners:
  - name: a
    listen: :8080
    engine: epoll
    routes: [{upstream: u}]
  - name: b
    listen: :8443
    engine: eventloop
    tls: {cert_file: CERT, key_file: KEY}
    routes: [{upstream: u}]
  - name: c
    protocol: tcp
    listen: :8082
    upstream: u
    engine: eventloop
    tls_passthrough: true
    sni: [{names: [a.example.com], upstream: u}]
  - name: d
    listen: :8081
    engine: eventloop
    routes: [{upstream: u}]
  - name: e
    listen: :8083
    engine: goroutine
    routes: [{upstream: u}]
  - name: f
    protocol: tcp
    listen: :8084
    upstream: u
    engine: eventloop
    proxy_protocol: {accept: true, trusted_proxies: [10.0.0.0/8]}
  - name: g
    protocol: tcp
    listen: :8085
    upstream: u
    engine: turbo
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	want := []string{
		`lb.yaml:4:13: unknown engine "epoll" (known: auto, goroutine, eventloop)`,
		`lb.yaml:8:13: engine: eventloop is for listeners without tls; a TLS listener runs on the goroutine engine`,
		`lb.yaml:15:13: engine: eventloop does not do tls_passthrough (it reads nothing of a connection before forwarding it); such a tcp listener runs on the goroutine engine (auto or goroutine)`,
		`lb.yaml:30:13: engine: eventloop does not do proxy_protocol.accept (it reads nothing of a connection before forwarding it); such a tcp listener runs on the goroutine engine (auto or goroutine)`,
		`lb.yaml:36:13: unknown engine "turbo" (known: auto, goroutine, eventloop)`,
	}
	if runtime.GOOS != "linux" {
		want = []string{want[0], want[1], `lb.yaml:15:13: engine: eventloop needs Linux (epoll); this is ` + runtime.GOOS,
			`lb.yaml:20:13: engine: eventloop needs Linux (epoll); this is ` + runtime.GOOS,
			`lb.yaml:30:13: engine: eventloop needs Linux (epoll); this is ` + runtime.GOOS, want[4]}
	}
	checkLines(t, problemLines(t, "lb.yaml", src), want)
}

// TestEventLoopIsTheDefaultWhereItCanServe: with no engine (or auto) a
// listener without tls is on the event loop on Linux and on the goroutine
// engine elsewhere; a TLS listener is on the goroutine engine; a named
// engine is that engine.
func TestEventLoopIsTheDefaultWhereItCanServe(t *testing.T) {
	linux := runtime.GOOS == "linux"
	tls := &TLS{}
	for _, tc := range []struct {
		l    Listener
		want bool
	}{
		{Listener{}, linux},
		{Listener{Engine: EngineAuto}, linux},
		{Listener{TLS: tls}, false},
		{Listener{Engine: EngineAuto, TLS: tls}, false},
		{Listener{Engine: EngineGoroutine}, false},
		{Listener{Engine: EngineEventLoop}, true},
		{Listener{Protocol: "tcp"}, linux},
		{Listener{Protocol: "tcp", TLSPassthrough: true}, false},
		{Listener{Protocol: "tcp", ProxyProtocol: &ProxyProtocol{Accept: true}}, false},
		{Listener{Protocol: "tcp", ProxyProtocol: &ProxyProtocol{Send: "v2"}}, linux},
		{Listener{Protocol: "tcp", Engine: EngineGoroutine}, false},
	} {
		if got := tc.l.EventLoop(); got != tc.want {
			t.Errorf("engine %q, tls %v: EventLoop() = %v, want %v", tc.l.Engine, tc.l.TLS != nil, got, tc.want)
		}
	}
}
