package demo

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/internal/app"
)

func TestDemoServesRoundRobinAndBackendsObey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *app.App, 1)
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		done <- Run(ctx, Options{
			Listen:   "127.0.0.1:0",
			Admin:    "127.0.0.1:0",
			Backends: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"},
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
	base := "http://" + a.Proxy().Addr("demo")
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		resp, err := http.Get(base + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen[resp.Header.Get("X-Backend")]++
		if !strings.HasPrefix(string(b), "hello from backend-") {
			t.Fatalf("body %q", b)
		}
	}
	if len(seen) != 3 || seen["backend-1"] != 2 {
		t.Fatalf("requests per backend %v, want 2 each", seen)
	}
	if !strings.Contains(out.String(), "curl -s http://127.0.0.1:") {
		t.Fatalf("the demo does not say what to curl:\n%s", out.String())
	}
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
