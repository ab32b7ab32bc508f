// Package demo runs `switchboard demo`: three demo backends on loopback and
// a switchboard in front of them, all in one process, with nothing else to
// install.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/app"
)

// Options configure the demo.
type Options struct {
	// Listen is the proxy's address. Default 127.0.0.1:8080.
	Listen string
	// Admin is the admin API's address. Default 127.0.0.1:9901.
	Admin string
	// Backends are the demo backends' addresses. Default 127.0.0.1:9001-9003.
	Backends []string
	Stdout   io.Writer
	Stderr   io.Writer
	// Started, if set, is called once everything serves (tests use it).
	Started func(*app.App)
}

// Run starts the demo and serves until ctx ends or SIGINT/SIGTERM.
func Run(ctx context.Context, opt Options) error {
	if opt.Listen == "" {
		opt.Listen = "127.0.0.1:8080"
	}
	if opt.Admin == "" {
		opt.Admin = "127.0.0.1:9901"
	}
	if len(opt.Backends) == 0 {
		opt.Backends = []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}
	}
	var backends []*Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	var addrs []string
	for i, addr := range opt.Backends {
		b, err := StartBackend(fmt.Sprintf("backend-%d", i+1), addr)
		if err != nil {
			return fmt.Errorf("start demo backend on %s: %w (is another demo running?)", addr, err)
		}
		backends = append(backends, b)
		addrs = append(addrs, b.Addr())
	}

	dir, err := os.MkdirTemp("", "switchboard-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "switchboard.yaml")
	if err := os.WriteFile(path, []byte(Config(opt.Listen, opt.Admin, addrs)), 0o600); err != nil {
		return err
	}
	a, err := app.New(path, app.Options{Stderr: opt.Stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(opt.Stdout, `
switchboard demo is running.

  proxy      http://%[1]s/        (round robin over %[3]d backends)
  admin      http://%[2]s/api/v1/upstreams
  metrics    http://%[2]s/metrics
  config     %[4]s   (edit it: switchboard reloads on save)

Try:
  curl -s http://%[1]s/                      # each call names the backend that answered
  for i in 1 2 3 4 5 6; do curl -s http://%[1]s/; done
  curl -s -X POST http://%[5]s/_demo/fail    # backend-1 answers 500: out of rotation within seconds
  curl -s -X POST http://%[5]s/_demo/slow?delay=500ms
  curl -s -X POST http://%[5]s/_demo/recover
  switchboard status --admin %[2]s

Ctrl-C stops everything.
`, a.Proxy().Addr("demo"), a.AdminAddr(), len(addrs), path, addrs[0])
	if opt.Started != nil {
		opt.Started(a)
	}
	return a.Run(ctx)
}

// Config is the demo's configuration file.
func Config(listen, admin string, backends []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# switchboard demo configuration (written by "switchboard demo")
admin:
  listen: %s
listeners:
  - name: demo
    listen: %s
    access_log: true
    routes:
      - match: {path_prefix: /}
        upstream: demo
upstreams:
  demo:
    balance: {policy: round_robin}
    health:
      active: {type: http, path: /healthz, interval: 1s, timeout: 500ms, rise: 2, fall: 2}
      passive: {consecutive_failures: 3, failure_statuses: [500, 502, 503, 504], base_ejection: 10s}
    targets:
`, admin, listen)
	for _, a := range backends {
		fmt.Fprintf(&b, "      - {address: %s}\n", a)
	}
	return b.String()
}

// Backend is a demo HTTP backend: it answers with its name, serves /healthz,
// and can be told to fail or slow down through POST /_demo/fail,
// /_demo/slow?delay=D and /_demo/recover.
type Backend struct {
	name string
	ln   net.Listener
	srv  *http.Server

	mu    sync.Mutex
	fail  bool
	delay time.Duration
}

// StartBackend starts a demo backend on addr ("127.0.0.1:0" for any port).
func StartBackend(name, addr string) (*Backend, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &Backend{name: name, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		fail := b.fail
		b.mu.Unlock()
		if fail {
			http.Error(w, b.name+" is failing\n", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /_demo/fail", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.fail = true
		b.mu.Unlock()
		fmt.Fprintf(w, "%s now answers 500\n", b.name)
	})
	mux.HandleFunc("POST /_demo/slow", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("delay"))
		if err != nil || d < 0 || d > time.Minute {
			http.Error(w, "delay must be a duration between 0 and 1m, like 500ms\n", http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.delay = d
		b.mu.Unlock()
		fmt.Fprintf(w, "%s now waits %s before answering\n", b.name, d)
	})
	mux.HandleFunc("POST /_demo/recover", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.fail, b.delay = false, 0
		b.mu.Unlock()
		fmt.Fprintf(w, "%s is healthy and fast again\n", b.name)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		fail, delay := b.fail, b.delay
		b.mu.Unlock()
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header().Set("X-Backend", b.name)
		if fail {
			http.Error(w, b.name+" is failing (POST /_demo/recover to fix)\n", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "hello from %s (%s %s)\n", b.name, r.Method, r.URL.Path)
	})
	b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := b.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "demo backend %s: %v\n", name, err)
		}
	}()
	return b, nil
}

// Addr is the backend's address.
func (b *Backend) Addr() string { return b.ln.Addr().String() }

// Name is the backend's name.
func (b *Backend) Name() string { return b.name }

// Close stops the backend.
func (b *Backend) Close() { b.srv.Close() }
