//go:build linux

package httpproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestEventLoopsHoldTheListeningSocketAlone: while the event loops serve
// an HTTP listener, the listener the runtime's poller watched is closed
// (its poller woke a thread for nothing at each new connection), and
// the loops' descriptor is the socket's only one; a reload to the
// goroutine engine and back keeps the socket (same address, still one
// descriptor of it, the goroutine engine's listener made from the
// loops'), a fresh connection is served at each step, and Shutdown
// closes the socket.
func TestEventLoopsHoldTheListeningSocketAlone(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	defer be.Close()
	beAddr := be.Listener.Addr().String()
	u, err := upstream.New("be", upstream.Config{Targets: []endpoint.Spec{{Address: beAddr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	tr := NewTransport(TransportConfig{MaxIdlePerEndpoint: 4}, u.Pool())
	defer tr.Close()
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()))
	shut := false
	defer func() {
		if !shut {
			s.Shutdown()
		}
	}()
	apply := func(engine string) {
		t.Helper()
		yaml := fmt.Sprintf(`listeners:
  - name: web
    listen: 127.0.0.1:0
    engine: %s
    routes: [{name: r, upstream: be}]
upstreams:
  be: {targets: [{address: %q}]}
`, engine, beAddr)
		cfg, err := config.Parse("test.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Prepare(cfg, func(name string) *pipeline.Route {
			p, err := pipeline.New(name, pipeline.Config{Timeout: 20 * time.Second}, u, tr)
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
		if err != nil {
			t.Fatalf("reload to engine %s: %v", engine, err)
		}
		c.Commit()
		if got := s.Engine("web"); got != engine {
			t.Fatalf("after the reload to engine %s the listener runs on %q", engine, got)
		}
	}
	// goListener is the listener the goroutine engine accepts from (nil
	// while the loops hold the socket).
	goListener := func() net.Listener {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.listeners["web"].loop.ln
	}

	apply(config.EngineGoroutine)
	addr := s.Addr("web")
	ino := listeningSocketInode(t, addr)
	first := goListener()
	get(t, addr, "/goroutine-0")

	for i, engine := range []string{config.EngineEventLoop, config.EngineGoroutine, config.EngineEventLoop} {
		step := fmt.Sprintf("step %d (%s)", i+1, engine)
		apply(engine)
		if got := s.Addr("web"); got != addr {
			t.Fatalf("%s: the listener is at %s, want %s (the same socket)", step, got, addr)
		}
		if n := socketDescriptors(t, ino); n != 1 {
			t.Fatalf("%s: the process has %d descriptors of the listening socket, want 1", step, n)
		}
		ln := goListener()
		if engine == config.EngineEventLoop {
			if ln != nil {
				t.Fatalf("%s: the loops serve the socket and the goroutine engine's listener (%T) is still open", step, ln)
			}
			// The listener of the goroutine engine's first turn is
			// closed: an Accept on a listener left open would time out.
			first.(*net.TCPListener).SetDeadline(time.Now())
			if c, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("%s: Accept on the goroutine engine's first listener: %v; want net.ErrClosed (the runtime's poller still watches the socket)", step, err)
			}
		} else if ln == nil {
			t.Fatalf("%s: the goroutine engine serves with no listener", step)
		}
		get(t, addr, fmt.Sprintf("/%s-%d", engine, i+1))
	}

	s.Shutdown()
	shut = true
	if n := socketDescriptors(t, ino); n != 0 {
		t.Fatalf("after Shutdown the process has %d descriptors of the listening socket, want none", n)
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("after Shutdown a connection to %s is accepted into a queue; want it refused", addr)
	}
}

// get sends GET path with Connection: close on a new connection to addr
// and checks the backend's answer.
func get(t *testing.T, addr, path string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "ok "+path {
		t.Fatalf("GET %s: %d %q (%v), want 200 %q", path, resp.StatusCode, body, err, "ok "+path)
	}
}

// listeningSocketInode is the inode of the socket listening on addr
// (127.0.0.1:port), from /proc/net/tcp.
func listeningSocketInode(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", p)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" {
			return f[9]
		}
	}
	t.Fatalf("no socket listens on %s in /proc/net/tcp", addr)
	return ""
}

// socketDescriptors counts the process's descriptors of the socket with
// inode ino.
func socketDescriptors(t *testing.T, ino string) int {
	t.Helper()
	return testutil.OpenFiles(t, func(target string) bool { return target == "socket:["+ino+"]" })
}
