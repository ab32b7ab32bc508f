package httpproxy_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

func TestRouteBreakerOpensThenFallbackAnswersWithoutTheUpstream(t *testing.T) {
	var hits atomic.Int64
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "down", 500)
	})
	p := startProxy(t, limitYAML(`        breaker: {window_size: 10, min_requests: 4, failure_rate: 0.5, open_for: 1m}
        fallback:
          on: [breaker_open]
          steps: [{type: static, status: 200, body: "served by the fallback"}]`, b.addr()))
	for i := 0; i < 4; i++ {
		if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 500 {
			t.Fatalf("request %d: %d, want the upstream's 500 while the breaker is closed", i, resp.StatusCode)
		}
	}
	// min_requests (4) failures at a 100% rate: open. From now on the
	// fallback answers and the upstream sees nothing.
	for i := 0; i < 5; i++ {
		resp, body := doGet(t, p.url("web")+"/", nil)
		if resp.StatusCode != 200 || body != "served by the fallback" || resp.Header.Get("X-Switchboard-Degraded") != "static: breaker_open" {
			t.Fatalf("open breaker: %d %q degraded %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
		}
	}
	if n := hits.Load(); n != 4 {
		t.Fatalf("upstream got %d requests, want exactly min_requests 4", n)
	}
	if got := p.metric("switchboard_breaker_state", map[string]string{"route": "api"}); got != 1 {
		t.Fatalf("switchboard_breaker_state = %v, want 1 (open)", got)
	}
	if got := p.metric("switchboard_fallback_responses_total", map[string]string{"route": "api", "step": "static", "reason": "breaker_open"}); got != 5 {
		t.Fatalf("fallback responses = %v", got)
	}
}

func TestRouteBreakerWithoutFallbackAnswers503(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusBadGateway) })
	p := startProxy(t, limitYAML(`        breaker: {window_size: 4, min_requests: 2, consecutive_failures: 2, open_for: 1m}`, b.addr()))
	doGet(t, p.url("web")+"/", nil)
	doGet(t, p.url("web")+"/", nil)
	resp, _ := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Switchboard-Error") != "breaker_open" {
		t.Fatalf("open breaker without fallback: %d %q", resp.StatusCode, resp.Header.Get("X-Switchboard-Error"))
	}
}

func TestStaleFallbackServesTheLastGoodBody(t *testing.T) {
	var fail atomic.Bool
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("last good " + r.URL.Path))
	})
	p := startProxy(t, limitYAML(`        fallback:
          on: [status:503]
          steps: [{type: stale, max_age: 1m}]`, b.addr()))
	if _, body := doGet(t, p.url("web")+"/item", nil); body != "last good /item" {
		t.Fatal(body)
	}
	fail.Store(true)
	resp, body := doGet(t, p.url("web")+"/item", nil)
	if resp.StatusCode != 200 || body != "last good /item" || resp.Header.Get("X-Switchboard-Degraded") != "stale: status:503" {
		t.Fatalf("stale: %d %q degraded %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
	// Nothing stored for another path: the upstream's answer goes through.
	if resp, _ := doGet(t, p.url("web")+"/other", nil); resp.StatusCode != 503 {
		t.Fatalf("no stale entry: %d, want the upstream's 503", resp.StatusCode)
	}
}

func TestFallbackOnNoHealthyEndpoint(t *testing.T) {
	b := newBackend(t, "b", nil)
	p := startProxy(t, limitYAML(`        fallback:
          on: [no_healthy_endpoint]
          steps: [{type: static, status: 200, headers: {Content-Type: text/plain}, body: "maintenance"}]`, b.addr()))
	for _, ep := range p.upstream("app").Pool().Snapshot().All {
		ep.SetStatus(endpoint.Unhealthy, "test", time.Now())
	}
	p.upstream("app").Pool().Refresh()
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 200 || body != "maintenance" || !strings.HasPrefix(resp.Header.Get("X-Switchboard-Degraded"), "static: no_healthy_endpoint") {
		t.Fatalf("%d %q %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
}
