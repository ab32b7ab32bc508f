package plane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// echoServer answers each line with "NAME: line".
func echoServer(t *testing.T, name string) string {
	t.Helper()
	return serveRaw(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s: %s", name, line)
		}
	})
}

func tcpYAML(listen, extra string, targets ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "shutdown_timeout: 5s\nlisteners:\n  - name: db\n    protocol: tcp\n    listen: %s\n    upstream: pg\n%s", listen, extra)
	b.WriteString("upstreams:\n  pg:\n    targets:\n")
	for _, a := range targets {
		fmt.Fprintf(&b, "      - {address: %s}\n", a)
	}
	return b.String()
}

// talk sends line on c and returns the answer.
func talk(t *testing.T, c net.Conn, r *bufio.Reader, line string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimSuffix(got, "\n")
}

func TestTCPListenerForwardsAndSurvivesReloads(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	addr := testutil.FreeAddr(t)
	p := startProxy(t, tcpYAML(addr, "", a, b))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	first := talk(t, c, r, "hello")
	if first != "a: hello" && first != "b: hello" {
		t.Fatalf("echo through the proxy: %q", first)
	}

	// A reload that changes the listener's settings (same address) keeps
	// the established connection.
	cfg, err := config.Parse("r.yaml", []byte(tcpYAML(addr, "    max_conns: 10\n", a, b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got, want := talk(t, c, r, "again"), first[:1]+": again"; got != want {
		t.Fatalf("after a reload that kept the listener: %q, want %q", got, want)
	}

	// Round robin across new connections.
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		c2, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[talk(t, c2, bufio.NewReader(c2), "x")] = true
		c2.Close()
	}
	if !seen["a: x"] || !seen["b: x"] {
		t.Fatalf("new connections reached %v, want both endpoints", seen)
	}

	// A reload that removes the listener refuses new connections at once
	// and lets the established one finish (drain).
	http := "listeners:\n  - {name: web, listen: '127.0.0.1:0', routes: [{upstream: pg}]}\nupstreams:\n  pg:\n    targets: [{address: " + a + "}]\n"
	cfg, err = config.Parse("r2.yaml", []byte(http))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if c3, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c3.SetDeadline(time.Now().Add(2 * time.Second))
		n, rerr := c3.Read(make([]byte, 1))
		c3.Close()
		if rerr == nil || n != 0 {
			t.Fatalf("a removed tcp listener still serves new connections")
		}
	}
	if got, want := talk(t, c, r, "draining"), first[:1]+": draining"; got != want {
		t.Fatalf("the established connection of a removed listener was cut: %q", got)
	}
}

// tcpEngine is the engine /api/v1/listeners shows for the tcp listener
// "db".
func tcpEngine(t *testing.T, p *proxy) string {
	t.Helper()
	for _, lv := range p.srv.Listeners() {
		if lv.Name == "db" {
			return lv.Engine
		}
	}
	t.Fatal("no listener db")
	return ""
}

// TestTCPListenerEngineShowsAndSwitchesOnReload: a tcp listener's engine
// (auto: the event loop on Linux) shows in the listener view; a reload
// that names the other engine keeps the address and the established
// connection, and serves new connections on the new engine.
func TestTCPListenerEngineShowsAndSwitchesOnReload(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loop is Linux's")
	}
	a := echoServer(t, "a")
	addr := testutil.FreeAddr(t)
	p := startProxy(t, tcpYAML(addr, "    engine: eventloop\n", a))
	if got := tcpEngine(t, p); got != "eventloop" {
		t.Fatalf("engine shown: %q, want eventloop", got)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got := talk(t, c, r, "on the loop"); got != "a: on the loop" {
		t.Fatalf("echo: %q", got)
	}
	cfg, err := config.Parse("r.yaml", []byte(tcpYAML(addr, "    engine: goroutine\n", a)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got := tcpEngine(t, p); got != "goroutine" {
		t.Fatalf("engine shown after the reload: %q, want goroutine", got)
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := talk(t, c2, bufio.NewReader(c2), "on goroutines"); got != "a: on goroutines" {
		t.Fatalf("a new connection after the engine switch: %q", got)
	}
	if got := talk(t, c, r, "still here"); got != "a: still here" {
		t.Fatalf("the connection established before the switch: %q", got)
	}
}
