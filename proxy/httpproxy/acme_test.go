package httpproxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/acme"
	"github.com/switchboard-dev/switchboard/upstream"
)

// blackHoleCA is an address that accepts connections and never answers:
// an ACME directory there would hold whoever waits on it.
func blackHoleCA(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// acmeServer applies configurations with a tls.acme listener "web" to a
// Server of its own.
type acmeServer struct {
	t *testing.T
	s *Server
	u *upstream.Upstream
}

func newACMEServer(t *testing.T) *acmeServer {
	u, err := upstream.New("u", upstream.Config{Targets: []endpoint.Spec{{Address: "a:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()))
	s.UseACMEMetrics(acme.NewMetrics(prometheus.NewRegistry()))
	t.Cleanup(s.Shutdown)
	return &acmeServer{t: t, s: s, u: u}
}

func (a *acmeServer) apply(acmeBlock string) {
	t := a.t
	t.Helper()
	yaml := fmt.Sprintf(`listeners:
  - name: web
    listen: 127.0.0.1:0
    tls:
      acme: %s
    routes: [{upstream: u}]
upstreams:
  u: {targets: [{address: a:1}]}
`, acmeBlock)
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.s.Prepare(cfg, func(name string) *pipeline.Route {
		p, err := pipeline.New(name, pipeline.Config{}, a.u, &statusTransport{status: 200})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Commit()
}

func (a *acmeServer) manager() *acme.Manager {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if e := a.s.acme["web"]; e != nil {
		return e.m
	}
	return nil
}

// TestACMEHandshakeFailsAtOnceWhileTheCAHangs: while a host's certificate
// is not obtained, its handshakes fail at once with a TLS alert, even
// when the CA holds every request; autocert alone would obtain inside
// the first handshake and hold the client there.
func TestACMEHandshakeFailsAtOnceWhileTheCAHangs(t *testing.T) {
	dir := t.TempDir() // removed after the server's shutdown
	a := newACMEServer(t)
	a.apply(fmt.Sprintf("{hosts: [shop.example.com], storage: '%s', directory: 'https://%s/dir'}", dir, blackHoleCA(t)))
	c, err := net.Dial("tcp", a.s.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Far longer than a refused handshake takes, far shorter than
	// autocert's 5 minutes on a CA that does not answer.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	err = tls.Client(c, &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "remote error: tls: internal error") {
		t.Fatalf("handshake: %v, want a TLS alert from the server (the certificate is not there yet)", err)
	}
}

// TestACMEManagerKeptAcrossReloadThatKeepsTheBlock: a reload that keeps
// the acme block keeps the manager (its certificates in memory, its
// renewal timers); one that changes it makes a new one.
func TestACMEManagerKeptAcrossReloadThatKeepsTheBlock(t *testing.T) {
	// The storage first: its removal must come after the server's
	// shutdown (cleanups run last-in first-out), which waits for the
	// managers that write into it.
	dir := t.TempDir()
	a := newACMEServer(t)
	ca := blackHoleCA(t)
	block := fmt.Sprintf("{hosts: [shop.example.com], storage: '%s', directory: 'https://%s/dir'}", dir, ca)
	a.apply(block)
	first := a.manager()
	if first == nil {
		t.Fatal("no ACME manager on the listener")
	}
	a.apply(block)
	if a.manager() != first {
		t.Fatal("a reload with the same acme block replaced the manager")
	}
	a.apply(strings.Replace(block, "shop.example.com", "shop.example.com, www.example.com", 1))
	second := a.manager()
	if second == first {
		t.Fatal("a reload that adds a host kept the old manager")
	}
	if got := second.Hosts(); len(got) != 2 {
		t.Fatalf("new manager's hosts %q, want both", got)
	}
}
