package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
	etcdreg "github.com/switchboard-dev/switchboard/registry/etcd"
)

// pool returns the running upstream's pool.
func pool(t *testing.T, a *app.App, name string) *endpoint.Pool {
	t.Helper()
	for _, u := range a.Plane().Upstreams() {
		if u.Name() == name {
			return u.Pool()
		}
	}
	t.Fatalf("no upstream %q", name)
	return nil
}

func splitPort(t *testing.T, hp string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// getOK sends n requests and returns how many did not get a 200.
func failures(url string, n int) (failed int, last string) {
	c := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < n; i++ {
		resp, err := c.Get(url)
		if err != nil {
			failed++
			last = err.Error()
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			failed++
			last = resp.Status
		}
	}
	return failed, last
}

// TestEtcdOutageAndRestartFromThePersistedView is issue 8's outage story:
// etcd stops while traffic flows (no request fails), switchboard restarts
// while etcd is still down and routes from its persisted view, and when etcd
// comes back the view converges to the registry again.
func TestEtcdOutageAndRestartFromThePersistedView(t *testing.T) {
	etcd := testutil.StartEtcd(t)
	r, err := etcdreg.New(etcdreg.Config{Endpoints: []string{etcd.Addr()}, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	register := func(s string, id string) {
		t.Helper()
		h, p := splitPort(t, s)
		err := r.Register(ctx, registry.Registration{
			Instance: registry.Instance{ID: id, Service: "api", Address: h, Port: p},
			Check:    registry.Check{TTL: 60 * time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	b1, b2, b3 := named(t, "b1"), named(t, "b2"), named(t, "b3")
	register(hostport(b1), "b1")
	register(hostport(b2), "b2")

	dir := t.TempDir()
	path := filepath.Join(dir, "switchboard.yaml")
	listen := freeAddr(t)
	writeFile(t, path, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registries:
  main: {kind: etcd, address: %s}
discovery: {cache_dir: %s}
listeners:
  - name: web
    listen: %s
    routes: [{upstream: api}]
upstreams:
  api:
    discovery: {registry: main, service: api}
`, etcd.Addr(), filepath.Join(dir, "cache"), listen))

	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	endpointtest.WaitReady(t, pool(t, a, "api"), 2)
	url := "http://" + listen + "/"
	if n, last := failures(url, 50); n != 0 {
		t.Fatalf("%d of 50 requests failed before the outage (last: %s)", n, last)
	}
	etcd.Stop()
	if n, last := failures(url, 300); n != 0 {
		t.Fatalf("%d of 300 requests failed while etcd was down (last: %s)", n, last)
	}
	a.Shutdown()

	// Restart during the outage: the persisted view routes.
	a, err = app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatalf("restart while etcd is down: %v", err)
	}
	defer a.Shutdown()
	if n := len(pool(t, a, "api").Snapshot().Ready); n != 2 {
		t.Fatalf("after a restart during the outage the pool has %d ready endpoints, want the 2 persisted", n)
	}
	if n, last := failures(url, 100); n != 0 {
		t.Fatalf("%d of 100 requests failed after a restart during the outage (last: %s)", n, last)
	}

	// etcd returns: the view converges (a third instance shows up).
	etcd.Restart(t)
	register(hostport(b3), "b3")
	endpointtest.WaitReady(t, pool(t, a, "api"), 3)
}

// TestEmbeddedRegistryFeedsUpstreamsAndAutoRoutes runs `serve` with the
// embedded registry: an upstream discovers its endpoints from it, and a
// listener with auto_routes gains and loses a route as a service with a
// urlprefix- tag registers and deregisters.
func TestEmbeddedRegistryFeedsUpstreamsAndAutoRoutes(t *testing.T) {
	api, web := named(t, "api"), named(t, "web")
	listen := freeAddr(t)
	a, _ := serve(t, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registry: {listen: 127.0.0.1:0}
listeners:
  - name: web
    listen: %s
    auto_routes: true
    routes: [{match: {path_prefix: /api}, upstream: api}]
upstreams:
  api:
    discovery: {registry: embedded, service: api}
`, listen))
	c, err := consul.NewClient(&consul.Config{Address: a.RegistryAddr()})
	if err != nil {
		t.Fatal(err)
	}
	reg := func(addr, name string, tags ...string) {
		t.Helper()
		h, p := splitPort(t, addr)
		err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
			ID: name, Name: name, Address: h, Port: p, Tags: tags,
			Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	base := "http://" + listen
	status := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, _ := status("/api"); code != 503 {
		t.Fatalf("/api before any registration: %d, want 503 (no endpoints)", code)
	}
	reg(hostport(api), "api")
	endpointtest.WaitReady(t, pool(t, a, "api"), 1)
	if code, body := status("/api"); code != 200 || body != "api" {
		t.Fatalf("/api: %d %q", code, body)
	}
	if code, _ := status("/web/x"); code != 404 {
		t.Fatalf("/web before its registration: %d, want 404", code)
	}
	reg(hostport(web), "web", "urlprefix-/web")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := status("/web/x")
		if code == 200 && body == "web" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the auto route for /web did not appear: %d %q", code, body)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	if err := c.Agent().ServiceDeregister("web"); err != nil {
		t.Fatal(err)
	}
	for {
		code, _ := status("/web/x")
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the auto route for /web outlived its last instance: %d", code)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// serve writes yaml to a config file and starts `switchboard serve` on it
// until the test ends; it returns the app and the file's path.
func serve(t *testing.T, yaml string) (*app.App, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	writeFile(t, path, yaml)
	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown() })
	return a, path
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRegistryHealthIsAnEndpointSignal: with passing_only: false, an
// instance the registry calls critical stays in the pool but in state
// unhealthy with the registry as the reason, and comes back when it passes.
func TestRegistryHealthIsAnEndpointSignal(t *testing.T) {
	b1, b2 := named(t, "b1"), named(t, "b2")
	listen := freeAddr(t)
	a, _ := serve(t, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registry: {listen: 127.0.0.1:0}
listeners:
  - name: web
    listen: %s
    routes: [{upstream: api}]
upstreams:
  api:
    discovery: {registry: embedded, service: api, passing_only: false}
`, listen))
	c, err := consul.NewClient(&consul.Config{Address: a.RegistryAddr()})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []string{hostport(b1), hostport(b2)} {
		h, p := splitPort(t, b)
		err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
			ID: fmt.Sprintf("b%d", i+1), Name: "api", Address: h, Port: p,
			Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p := pool(t, a, "api")
	endpointtest.WaitReady(t, p, 2)
	if err := c.Agent().FailTTL("service:b1", "disk full"); err != nil {
		t.Fatal(err)
	}
	endpointtest.WaitReady(t, p, 1)
	set := p.Snapshot()
	if len(set.All) != 2 {
		t.Fatalf("the critical instance left the pool (%d endpoints); with passing_only: false it stays, marked", len(set.All))
	}
	for _, ep := range set.All {
		st := ep.Status()
		if ep.Address() == hostport(b1) && (st.State != endpoint.Unhealthy || st.Reason != "registry: critical") {
			t.Fatalf("b1 is %s (%q), want unhealthy (registry: critical)", st.State, st.Reason)
		}
	}
	for i := 0; i < 4; i++ {
		if n, last := failures("http://"+listen+"/", 1); n != 0 {
			t.Fatalf("request %d failed: %s", i, last)
		}
	}
	if err := c.Agent().PassTTL("service:b1", ""); err != nil {
		t.Fatal(err)
	}
	endpointtest.WaitReady(t, p, 2)
}

// TestFailedReloadLeavesRegistriesAlone: a reload that changes a
// registry's settings but fails elsewhere (a listener on a busy port)
// changes nothing: the upstream keeps following the registry as it was.
func TestFailedReloadLeavesRegistriesAlone(t *testing.T) {
	b1, b2 := named(t, "b1"), named(t, "b2")
	dir := t.TempDir()
	fileA, fileB := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	svc := func(addrs ...string) string {
		s := "services:\n  api:\n"
		for i, a := range addrs {
			h, p := splitPort(t, a)
			s += fmt.Sprintf("    - {id: i%d, address: %s, port: %d}\n", i, h, p)
		}
		return s
	}
	writeFile(t, fileA, svc(hostport(b1)))
	writeFile(t, fileB, svc(hostport(b2)))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	listen := freeAddr(t)
	conf := func(file, extraListener string) string {
		return fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registries:
  files: {kind: static, file: %s}
listeners:
  - name: web
    listen: %s
    routes: [{upstream: api}]
%supstreams:
  api:
    discovery: {registry: files, service: api}
`, file, listen, extraListener)
	}
	path := filepath.Join(dir, "switchboard.yaml")
	writeFile(t, path, conf(fileA, ""))
	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	endpointtest.WaitReady(t, pool(t, a, "api"), 1)
	writeFile(t, path, conf(fileB, fmt.Sprintf("  - name: busy\n    listen: %s\n    routes: [{upstream: api}]\n", busy.Addr())))
	if err := a.Reload(); err == nil {
		t.Fatal("a reload onto a busy port succeeded")
	}
	// Still following file A: an edit to it arrives, B's instance does not.
	writeFile(t, fileA, svc(hostport(b1), hostport(b2))+"    - {id: i9, address: 127.0.0.1, port: 1}\n")
	endpointtest.WaitReady(t, pool(t, a, "api"), 3)
}

// TestReloadOntoADownRegistryKeepsTheEndpoints: a reload that moves an
// upstream from targets to a registry that does not answer keeps the
// endpoints it had until the registry answers, instead of emptying the
// pool.
func TestReloadOntoADownRegistryKeepsTheEndpoints(t *testing.T) {
	b1 := named(t, "b1")
	dir := t.TempDir()
	listen := freeAddr(t)
	path := filepath.Join(dir, "switchboard.yaml")
	writeFile(t, path, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
listeners:
  - {name: web, listen: %s, routes: [{upstream: api}]}
upstreams:
  api: {targets: [{address: %s}]}
`, listen, hostport(b1)))
	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	writeFile(t, path, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registries:
  down: {kind: consul, address: %s}
listeners:
  - {name: web, listen: %s, routes: [{upstream: api}]}
upstreams:
  api:
    discovery: {registry: down, service: api}
`, freeAddr(t), listen))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if n, last := failures("http://"+listen+"/", 20); n != 0 {
		t.Fatalf("%d of 20 requests failed after moving to a registry that is down (last: %s)", n, last)
	}
}

// TestAdminListsTCPListeners: GET /api/v1/tcp shows a tcp listener's
// connections and the endpoint they went to.
func TestAdminListsTCPListeners(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			io.Copy(c, c)
			c.Close()
		}
	}()
	listen := freeAddr(t)
	a, _ := serve(t, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
listeners:
  - {name: db, protocol: tcp, listen: %s, upstream: pg}
upstreams:
  pg: {targets: [{address: %s}]}
`, listen, backend.Addr()))
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tcp listener: %q, %v", buf, err)
	}
	resp, err := http.Get("http://" + a.AdminAddr() + "/api/v1/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Listeners []struct {
			Listener  string
			Active    int
			Accepted  uint64
			Endpoints []struct {
				Address string
				Active  int
			}
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(got.Listeners) != 1 || got.Listeners[0].Listener != "db" || got.Listeners[0].Accepted != 1 || got.Listeners[0].Active != 1 ||
		len(got.Listeners[0].Endpoints) != 1 || got.Listeners[0].Endpoints[0].Address != backend.Addr().String() || got.Listeners[0].Endpoints[0].Active != 1 {
		t.Fatalf("GET /api/v1/tcp = %+v; want listener db with 1 accepted, 1 active, to %s", got, backend.Addr())
	}
}
