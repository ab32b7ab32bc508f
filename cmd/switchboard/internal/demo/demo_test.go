package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
)

func TestDemoRoutesFromTheRegistryAndFailsOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *app.App, 1)
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		done <- Run(ctx, Options{
			Listen:   "127.0.0.1:0",
			Admin:    "127.0.0.1:0",
			Registry: "127.0.0.1:0",
			Backends: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"},
			Command:  "go run ./cmd/switchboard",
			Stdout:   &out, Stderr: io.Discard,
			Started: func(a *app.App) { started <- a },
		})
	}()
	var a *app.App
	select {
	case a = <-started:
	case err := <-done:
		t.Fatalf("demo did not start: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo exit: %v", err)
		}
	}()

	// The route comes from the registrations' urlprefix-/ tag; the demo
	// starts once it serves.
	pool := upstreamPool(t, a, plane.AutoUpstreamName("demo"))

	endpointtest.WaitReady(t, pool, 3)

	base := "http://" + a.Plane().Addr("demo")
	get := func() (int, string) {
		resp, err := http.Get(base + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && !strings.HasPrefix(string(b), "hello from backend-") {
			t.Fatalf("body %q", b)
		}
		return resp.StatusCode, resp.Header.Get("X-Backend")
	}
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		_, b := get()
		seen[b]++
	}
	if len(seen) != 3 || seen["backend-1"] != 2 {
		t.Fatalf("requests per backend %v, want 2 each", seen)
	}

	// Failover: backend-1's check fails, the registry marks it critical,
	// and it takes no traffic, but stays in the pool: visible, with its
	// reason and its counters.
	backend1 := backendAddr(t, out.String())
	ep1 := func() admin.EndpointView {
		t.Helper()
		resp, err := http.Get("http://" + a.AdminAddr() + "/api/v1/upstreams")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct{ Upstreams []admin.UpstreamView }
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		for _, u := range v.Upstreams {
			for _, e := range u.Endpoints {
				if e.Address == backend1 {
					return e
				}
			}
		}
		t.Fatalf("backend-1 (%s) is not in the admin API's upstreams: %+v", backend1, v.Upstreams)
		return admin.EndpointView{}
	}
	before := ep1().Requests
	resp, err := http.Post("http://"+backend1+"/_demo/fail", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	endpointtest.WaitReady(t, pool, 2)
	for i := 0; i < 6; i++ {
		code, b := get()
		if code != 200 || b == "backend-1" {
			t.Fatalf("after failover: %d from %q, want 200 from backend-2 or -3", code, b)
		}
	}
	if e := ep1(); e.State != "unhealthy" || e.Reason != "registry: critical" || e.Requests != before {
		t.Fatalf("backend-1 after its check failed: %s (%q), %d requests; want unhealthy (registry: critical) with its %d requests", e.State, e.Reason, e.Requests, before)
	}
	resp, err = http.Post("http://"+backend1+"/_demo/recover", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	endpointtest.WaitReady(t, pool, 3)
	if e := ep1(); e.State != "healthy" || e.Requests != before {
		t.Fatalf("backend-1 back: %s, %d requests; want healthy, its count kept (%d)", e.State, e.Requests, before)
	}
	if !strings.Contains(out.String(), "curl -s http://127.0.0.1:") || !strings.Contains(out.String(), "/v1/health/service/demo?passing") {
		t.Fatalf("the demo does not say what to curl:\n%s", out.String())
	}
	// The hint repeats the command the user ran, not a binary they may
	// not have.
	if want := "go run ./cmd/switchboard status --admin " + a.AdminAddr(); !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "http://"+a.AdminAddr()+"/ui/") {
		t.Fatalf("the demo's hints do not say %q:\n%s", want, out.String())
	}
}

// backendAddr reads backend-1's address from the demo's printed help.
func backendAddr(t *testing.T, out string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "curl -s -X POST http://")
	if !ok {
		t.Fatalf("no backend address in the demo's output:\n%s", out)
	}
	addr, _, _ := strings.Cut(rest, "/")
	return addr
}

func upstreamPool(t *testing.T, a *app.App, name string) *endpoint.Pool {
	t.Helper()
	for _, u := range a.Plane().Upstreams() {
		if u.Name() == name {
			return u.Pool()
		}
	}
	t.Fatalf("upstream %q is not running", name)
	return nil
}

func TestBackendFailsAndRecoversOnCommand(t *testing.T) {
	b, err := StartBackend("b", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	url := "http://" + b.Addr()
	status := func(method, path string) int {
		req, _ := http.NewRequest(method, url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("GET", "/"); s != 200 {
		t.Fatalf("healthy: %d", s)
	}
	status("POST", "/_demo/fail")
	if s, h := status("GET", "/"), status("GET", "/healthz"); s != 500 || h != 500 {
		t.Fatalf("failing: %d, healthz %d", s, h)
	}
	if s := status("POST", "/_demo/slow?delay=forever"); s != 400 {
		t.Fatalf("bad delay: %d", s)
	}
	status("POST", "/_demo/recover")
	if s := status("GET", "/"); s != 200 {
		t.Fatalf("recovered: %d", s)
	}
}
