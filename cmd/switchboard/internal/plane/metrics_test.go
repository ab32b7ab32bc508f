package plane_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// TestEndpointUpstreamAndRouteSeries drives traffic of known shape through
// the proxy to a real backend and pins the series it must leave: each
// endpoint's answers by status class and their latency, the upstream's
// time to first byte, the body bytes by route, the no-route count without
// a duration series, an upstream whose per-endpoint histograms are off,
// the active checks' results and durations, and panic mode.
func TestEndpointUpstreamAndRouteSeries(t *testing.T) {
	be := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case strings.HasSuffix(r.URL.Path, "/missing"):
			http.NotFound(w, r) // "404 page not found\n": 19 bytes
		case strings.HasSuffix(r.URL.Path, "/broken"):
			http.Error(w, "boom", http.StatusInternalServerError) // "boom\n"
		default:
			fmt.Fprint(w, "hello")
		}
	})
	dead := deadAddr(t)
	p := startProxy(t, fmt.Sprintf(`admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: quiet, match: {path_prefix: /quiet}, upstream: lean}
      - {name: main, match: {path_prefix: /app}, upstream: app}
upstreams:
  app:
    health:
      active: {type: tcp, interval: 200ms, allow_fast: true, timeout: 150ms, fall: 1, rise: 1}
    targets: [{address: %[1]s}]
  lean:
    metrics: {per_endpoint_histograms: false}
    targets: [{address: %[1]s}]
  sick:
    health:
      panic_threshold: 0.6
      active: {type: tcp, interval: 200ms, allow_fast: true, timeout: 150ms, fall: 1, rise: 1}
    targets: [{address: %[1]s}, {address: %[2]s}]
`, be.addr(), dead))
	c := &http.Client{Timeout: 10 * time.Second}
	base := p.url("web")
	want := map[string]int{"/app/ok": 200, "/app/a/missing": 404, "/app/b/missing": 404, "/app/broken": 500, "/quiet/1": 200, "/quiet/2": 200, "/nowhere": 404}
	for _, path := range []string{"/app/ok", "/app/ok", "/app/ok", "/app/a/missing", "/app/b/missing", "/app/broken", "/quiet/1", "/quiet/2", "/nowhere"} {
		if resp, _ := get(t, c, base+path); resp.StatusCode != want[path] {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want[path])
		}
	}
	resp, err := c.Post(base+"/app/ok", "application/octet-stream", strings.NewReader(strings.Repeat("x", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /app/ok: %d", resp.StatusCode)
	}

	ep := be.addr()
	app := map[string]string{"upstream": "app", "endpoint": ep}
	for _, x := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"switchboard_endpoint_responses_total", with(app, "code", "2xx"), 4},
		{"switchboard_endpoint_responses_total", with(app, "code", "4xx"), 2},
		{"switchboard_endpoint_responses_total", with(app, "code", "5xx"), 1},
		{"switchboard_endpoint_request_duration_seconds", app, 7},
		{"switchboard_upstream_response_header_seconds", map[string]string{"upstream": "app"}, 7},
		{"switchboard_upstream_response_header_seconds", map[string]string{"upstream": "lean"}, 2},
		{"switchboard_endpoint_responses_total", map[string]string{"upstream": "lean", "endpoint": ep, "code": "2xx"}, 2},
		{"switchboard_http_request_bytes_total", map[string]string{"listener": "web", "route": "main"}, 1000},
		{"switchboard_http_request_bytes_total", map[string]string{"listener": "web", "route": "quiet"}, 0},
		{"switchboard_http_response_bytes_total", map[string]string{"listener": "web", "route": "main"}, 4*5 + 2*19 + 5},
		{"switchboard_http_response_bytes_total", map[string]string{"listener": "web", "route": "quiet"}, 2 * 5},
		{"switchboard_http_requests_total", map[string]string{"listener": "web", "route": "", "code": "404"}, 1},
	} {
		if !p.has(x.name, x.labels) {
			t.Errorf("no series %s%v", x.name, x.labels)
		} else if got := p.metric(x.name, x.labels); got != x.want {
			t.Errorf("%s%v = %v, want %v", x.name, x.labels, got, x.want)
		}
	}
	if p.has("switchboard_endpoint_responses_total", with(app, "code", "3xx")) {
		t.Error("a 3xx series exists though no endpoint answered 3xx")
	}
	if p.has("switchboard_endpoint_request_duration_seconds", map[string]string{"upstream": "lean"}) {
		t.Error("upstream lean has per-endpoint histograms though metrics.per_endpoint_histograms is false")
	}
	if p.has("switchboard_http_request_duration_seconds", map[string]string{"route": ""}) {
		t.Error("requests that matched no route have a duration series")
	}
	if p.has("switchboard_upstream_response_header_seconds", map[string]string{"upstream": "sick"}) {
		t.Error("upstream sick, which no request reached, has a time-to-first-byte series")
	}

	// Active checks: the live endpoint passes, the dead one fails, and
	// the dead one's failure puts sick (1 of 2 ready, under 0.6) in panic.
	testutil.WaitFor(t, 10*time.Second, "checks of both outcomes and panic mode", func() bool {
		return p.metric("switchboard_health_checks_total", map[string]string{"upstream": "app", "endpoint": ep, "result": "pass"}) >= 1 &&
			p.metric("switchboard_health_checks_total", map[string]string{"upstream": "sick", "endpoint": dead, "result": "fail"}) >= 1 &&
			p.metric("switchboard_upstream_panic_mode", map[string]string{"upstream": "sick"}) == 1
	})
	if p.has("switchboard_health_checks_total", map[string]string{"upstream": "app", "result": "fail"}) {
		t.Error("a check of app's live endpoint failed")
	}
	if got := p.metric("switchboard_upstream_panic_mode", map[string]string{"upstream": "app"}); got != 0 || !p.has("switchboard_upstream_panic_mode", map[string]string{"upstream": "app"}) {
		t.Errorf("app's panic mode = %v (or absent), want 0", got)
	}
	h := p.series("switchboard_health_check_duration_seconds", map[string]string{"upstream": "app"})
	if h == nil || h.GetHistogram().GetSampleCount() == 0 {
		t.Fatal("no check durations observed for app")
	}
	if avg := h.GetHistogram().GetSampleSum() / float64(h.GetHistogram().GetSampleCount()); avg <= 0 || avg > 0.15 {
		t.Errorf("app's checks took %vs on average, want a positive time within the 150ms timeout", avg)
	}
}

// with returns labels plus k=v.
func with(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range labels {
		out[a] = b
	}
	return out
}

// TestCertificateExpiryOfAListener pins that a TLS listener's certificate
// loaded from files reports its expiry under its name, and that the series
// goes when a reload takes the listener's TLS away.
func TestCertificateExpiryOfAListener(t *testing.T) {
	be := newBackend(t, "b", nil)
	plain := upstreamYAML("", be.addr())
	p := startProxy(t, withTLS(t, plain))
	c := dialTLS(t, p.srv.Addr("web"), "http/1.1")
	leaf := c.ConnectionState().PeerCertificates[0]
	c.Close()
	labels := map[string]string{"listener": "web", "name": leaf.DNSNames[0]}
	if got, want := p.metric("switchboard_certificate_expiry_timestamp_seconds", labels), float64(leaf.NotAfter.Unix()); got != want {
		t.Fatalf("switchboard_certificate_expiry_timestamp_seconds%v = %v, want %v (the served certificate's NotAfter)", labels, got, want)
	}
	cfg, err := config.Parse("plain.yaml", []byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if p.has("switchboard_certificate_expiry_timestamp_seconds", map[string]string{"listener": "web"}) {
		t.Fatal("the listener's certificate expiry is still exported after a reload took its TLS away")
	}
}
