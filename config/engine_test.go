package config

import (
	"runtime"
	"strings"
	"testing"
)

// TestEngineProblemsArePlaced: an unknown engine, the event loop on a TLS
// listener and engine on a tcp listener are reported at their value or
// key; on a system other than Linux the event loop is refused too.
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
  - name: d
    listen: :8081
    engine: eventloop
    routes: [{upstream: u}]
  - name: e
    listen: :8083
    engine: goroutine
    routes: [{upstream: u}]
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	want := []string{
		`lb.yaml:4:13: unknown engine "epoll" (known: auto, goroutine, eventloop)`,
		`lb.yaml:8:13: engine: eventloop is for listeners without tls; a TLS listener runs on the goroutine engine`,
		`lb.yaml:15:5: engine is for http listeners; a tcp listener forwards connections to its upstream`,
	}
	if runtime.GOOS != "linux" {
		want = append(want, `lb.yaml:18:13: engine: eventloop needs Linux (epoll); this is `+runtime.GOOS)
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
	} {
		if got := tc.l.EventLoop(); got != tc.want {
			t.Errorf("engine %q, tls %v: EventLoop() = %v, want %v", tc.l.Engine, tc.l.TLS != nil, got, tc.want)
		}
	}
}
