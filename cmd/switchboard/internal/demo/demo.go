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
	"strconv"
	"sync"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
)

// Options configure the demo.
type Options struct {
	// Listen is the proxy's address. Default 127.0.0.1:8080.
	Listen string
	// Admin is the admin API's address. Default 127.0.0.1:9901.
	Admin string
	// Registry is the embedded registry's address. Default 127.0.0.1:8500.
	Registry string
	// Backends are the demo backends' addresses. Default 127.0.0.1:9001-9003.
	Backends []string
	// Command is how the user ran switchboard, for the hints the demo
	// prints ("switchboard", "./bin/switchboard", "go run
	// ./cmd/switchboard"). Default "switchboard".
	Command string
	Stdout  io.Writer
	Stderr  io.Writer
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
	if opt.Registry == "" {
		opt.Registry = "127.0.0.1:8500"
	}
	if opt.Command == "" {
		opt.Command = "switchboard"
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
	if err := os.WriteFile(path, []byte(Config(opt.Listen, opt.Admin, opt.Registry)), 0o600); err != nil {
		return err
	}
	a, err := app.New(path, app.Options{Stderr: opt.Stderr})
	if err != nil {
		return err
	}
	// The backends register the way any service would: with the official
	// Consul client, over HTTP, each with an HTTP check and the tag that
	// asks switchboard for a route.
	regAddr := a.RegistryAddr()
	if err := register(ctx, regAddr, backends); err != nil {
		a.Shutdown()
		return fmt.Errorf("register the demo backends: %w", err)
	}
	if err := waitRouted(ctx, "http://"+a.Plane().Addr("demo")+"/"); err != nil {
		a.Shutdown()
		return err
	}
	fmt.Fprintf(opt.Stdout, `
switchboard demo is running.

  proxy      http://%[1]s/        (auto route from the registry, round robin over %[3]d backends)
  registry   http://%[6]s/v1/health/service/demo?passing   (Consul's HTTP API)
  dashboard  http://%[2]s/ui/
  admin      http://%[2]s/api/v1/upstreams
  metrics    http://%[2]s/metrics
  config     %[4]s   (edit it: switchboard reloads on save)

Try:
  curl -s http://%[1]s/                      # each call names the backend that answered
  for i in 1 2 3 4 5 6; do curl -s http://%[1]s/; done
  curl -s -X POST http://%[5]s/_demo/fail    # backend-1's check fails: the registry marks it critical
                                                 # and traffic fails over to the others within a second or two
  curl -s -X POST http://%[5]s/_demo/recover # it passes its check again and rejoins
  curl -s -X POST http://%[5]s/_demo/slow?delay=500ms
  curl -s 'http://%[6]s/v1/health/service/demo?passing' | head -c 300; echo
  %[7]s status --admin %[2]s
  %[7]s explain --admin %[2]s http://%[1]s/hello   # which route and endpoints, and why

Ctrl-C stops everything.
`, a.Plane().Addr("demo"), a.AdminAddr(), len(addrs), path, addrs[0], regAddr, opt.Command)
	if opt.Started != nil {
		opt.Started(a)
	}
	return a.Run(ctx)
}

// Config is the demo's configuration file: the embedded registry, and a
// listener whose routes come from the registrations' urlprefix- tags.
func Config(listen, admin, registry string) string {
	return fmt.Sprintf(`# switchboard demo configuration (written by "switchboard demo")
admin:
  listen: %s
registry:
  listen: %s
listeners:
  - name: demo
    listen: %s
    access_log: true
    auto_routes: true    # a service tagged urlprefix-/ gets the route /
`, admin, registry, listen)
}

// waitRouted waits until the proxy answers url with a 200: the registry's
// auto route is in place.
func waitRouted(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := c.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the demo route did not come up: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// register registers the backends as instances of the service "demo" with
// HTTP checks every second, and waits (with a blocking query) until all of
// them pass.
func register(ctx context.Context, registryAddr string, backends []*Backend) error {
	// Scheme, token and TLS set explicitly: the client would otherwise take
	// them from CONSUL_HTTP_* variables meant for some other Consul.
	c, err := consul.NewClient(&consul.Config{Address: registryAddr, Scheme: "http", Token: "", TLSConfig: consul.TLSConfig{}})
	if err != nil {
		return err
	}
	for _, b := range backends {
		host, portStr, _ := net.SplitHostPort(b.Addr())
		port, _ := strconv.Atoi(portStr)
		err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
			ID: b.Name(), Name: "demo", Address: host, Port: port,
			Tags: []string{"urlprefix-/"},
			Check: &consul.AgentServiceCheck{
				HTTP: "http://" + b.Addr() + "/healthz", Interval: "1s", Timeout: "500ms",
			},
		})
		if err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var index uint64
	for {
		entries, meta, err := c.Health().Service("demo", "", true, (&consul.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx))
		if err != nil {
			return err
		}
		if len(entries) == len(backends) {
			return nil
		}
		index = meta.LastIndex
	}
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
