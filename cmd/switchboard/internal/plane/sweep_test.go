package plane_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
)

func TestMetricsOfRemovedOwnersAreSwept(t *testing.T) {
	b1, b2, b3 := newBackend(t, "b1", nil), newBackend(t, "b2", nil), newBackend(t, "b3", nil)
	dead := deadAddr(t)
	before := fmt.Sprintf(`listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: keep, match: {path_prefix: /keep}, upstream: app}
      - {name: moved, match: {path_prefix: /moved}, upstream: app}
      - {name: gone, match: {path_prefix: /gone}, upstream: other}
upstreams:
  app:
    targets: [{address: %s}, {address: %s}]
  other:
    targets: [{address: %s}]
  third:
    targets: [{address: %s}]
`, b1.addr(), dead, b2.addr(), b3.addr())
	p := startProxy(t, before)
	c := &http.Client{Timeout: 5 * time.Second}
	for range 4 { // round robin: some meet the dead endpoint first
		get(t, c, p.url("web")+"/keep")
	}
	get(t, c, p.url("web")+"/moved")
	get(t, c, p.url("web")+"/gone")
	if resp, _ := get(t, c, p.url("web")+"/nowhere"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/nowhere: %d, want 404", resp.StatusCode)
	}

	type series struct {
		name   string
		labels map[string]string
	}
	kept := map[string]series{
		"kept route":              {"switchboard_http_requests_total", map[string]string{"route": "keep", "code": "200"}},
		"kept route's latency":    {"switchboard_http_request_duration_seconds", map[string]string{"route": "keep"}},
		"no route (404)":          {"switchboard_http_requests_total", map[string]string{"route": "", "code": "404"}},
		"kept listener":           {"switchboard_http_requests_in_flight", map[string]string{"listener": "web"}},
		"moved route, new pair":   {"switchboard_http_request_duration_seconds", map[string]string{"route": "moved", "upstream": "third"}},
		"kept route's bytes":      {"switchboard_http_response_bytes_total", map[string]string{"listener": "web", "route": "keep"}},
		"kept upstream's TTFB":    {"switchboard_upstream_response_header_seconds", map[string]string{"upstream": "app"}},
		"kept endpoint's latency": {"switchboard_endpoint_request_duration_seconds", map[string]string{"upstream": "app", "endpoint": b1.addr()}},
	}
	gone := map[string]series{
		"removed route":               {"switchboard_http_requests_total", map[string]string{"route": "gone"}},
		"removed route's latency":     {"switchboard_http_request_duration_seconds", map[string]string{"route": "gone"}},
		"moved route, old pair":       {"switchboard_http_requests_total", map[string]string{"route": "moved", "upstream": "app"}},
		"removed upstream's endpoint": {"switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": dead}},
		"removed route's bytes":       {"switchboard_http_response_bytes_total", map[string]string{"listener": "web", "route": "gone"}},
		"removed upstream's TTFB":     {"switchboard_upstream_response_header_seconds", map[string]string{"upstream": "other"}},
		"removed upstream's latency":  {"switchboard_endpoint_request_duration_seconds", map[string]string{"upstream": "other", "endpoint": b2.addr()}},
	}
	for what, s := range gone {
		if !p.has(s.name, s.labels) {
			t.Fatalf("before the reload: no %s series (%s %v)", what, s.name, s.labels)
		}
	}

	// The reload drops route "gone" and upstream "other", moves route
	// "moved" to upstream "third", and takes app's dead target out.
	after := fmt.Sprintf(`listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: keep, match: {path_prefix: /keep}, upstream: app}
      - {name: moved, match: {path_prefix: /moved}, upstream: third}
upstreams:
  app:
    targets: [{address: %s}]
  third:
    targets: [{address: %s}]
`, b1.addr(), b3.addr())
	cfg, err := config.Parse("after.yaml", []byte(after))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	get(t, c, p.url("web")+"/moved")

	present := func(when string, want map[string]bool) {
		t.Helper()
		for what, s := range gone {
			if got := p.has(s.name, s.labels); got != want[what] {
				t.Fatalf("%s: %s series present = %v, want %v", when, what, got, want[what])
			}
		}
	}
	all := func(v bool) map[string]bool {
		m := map[string]bool{}
		for what := range gone {
			m[what] = v
		}
		return m
	}
	// The first sweep after the reload still counts the replaced table's
	// owners as present, and only marks the endpoint that left.
	if n := p.srv.SweepMetrics(); n != 0 {
		t.Fatalf("first sweep after the reload deleted %d series, want 0", n)
	}
	present("after one sweep", all(true))
	// The second deletes the series of the endpoint and the upstream
	// that left, and marks the table's.
	p.srv.SweepMetrics()
	want := all(true)
	want["removed upstream's endpoint"] = false
	want["removed upstream's TTFB"] = false
	want["removed upstream's latency"] = false
	present("after two sweeps", want)
	// The third deletes those.
	p.srv.SweepMetrics()
	present("after three sweeps", all(false))
	for what, s := range kept {
		if !p.has(s.name, s.labels) {
			t.Errorf("after three sweeps: %s series deleted (%s %v)", what, s.name, s.labels)
		}
	}
	// The cached series of what stayed still count.
	n404 := p.metric("switchboard_http_requests_total", map[string]string{"route": "", "code": "404"})
	get(t, c, p.url("web")+"/nowhere")
	if got := p.metric("switchboard_http_requests_total", map[string]string{"route": "", "code": "404"}); got != n404+1 {
		t.Fatalf("404s after the sweeps: %v, want %v", got, n404+1)
	}

	// An owner that comes back between two sweeps starts its grace again
	// when it next goes.
	apply := func(yaml string) {
		t.Helper()
		cfg, err := config.Parse("x.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatal(err)
		}
	}
	withoutMoved := strings.Replace(after, "      - {name: moved, match: {path_prefix: /moved}, upstream: third}\n", "", 1)
	moved := map[string]string{"route": "moved", "upstream": "third"}
	apply(withoutMoved)
	p.srv.SweepMetrics() // the replaced table's owners still count
	p.srv.SweepMetrics() // marks
	apply(after)
	apply(withoutMoved) // back and gone again between two sweeps
	p.srv.SweepMetrics()
	p.srv.SweepMetrics()
	if !p.has("switchboard_http_request_duration_seconds", moved) {
		t.Fatal("a route that was back between two sweeps lost its series one sweep after it went again")
	}
	p.srv.SweepMetrics()
	if p.has("switchboard_http_request_duration_seconds", moved) {
		t.Fatal("the removed route's series survived three sweeps")
	}
}

// A request still running on a replaced routing table keeps its route's
// series, however many sweeps pass, and is counted when it ends.
func TestMetricsSweepKeepsSeriesOfRequestsInFlight(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, "late")
	})
	fast := newBackend(t, "fast", nil)
	cfg := func(withSlow bool) string {
		y := "listeners:\n  - name: web\n    listen: 127.0.0.1:0\n    routes:\n      - {name: keep, match: {path_prefix: /keep}, upstream: fast}\n"
		if withSlow {
			y += "      - {name: slow, match: {path_prefix: /slow}, upstream: slow, timeout: 0s}\n"
		}
		return y + fmt.Sprintf("upstreams:\n  fast:\n    targets: [{address: %s}]\n  slow:\n    targets: [{address: %s}]\n", fast.addr(), slow.addr())
	}
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	p := startProxy(t, cfg(true))
	t.Cleanup(unblock) // before the backends' Close: a failure must not hang
	url := p.url("web")
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(url + "/slow")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-arrived
	c, err := config.Parse("x.yaml", []byte(cfg(false)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(c); err != nil {
		t.Fatal(err)
	}
	slowSeries := map[string]string{"route": "slow"}
	for range 4 {
		p.srv.SweepMetrics()
	}
	if !p.has("switchboard_http_request_duration_seconds", slowSeries) {
		t.Fatal("the series of a route with a request in flight went while the request ran")
	}
	unblock()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the slow request ended with %d, want 200", code)
	}
	if got := p.metric("switchboard_http_requests_total", map[string]string{"route": "slow", "code": "200"}); got != 1 {
		t.Fatalf("requests counted for the removed route = %v, want 1", got)
	}
	p.srv.SweepMetrics() // the table no longer serves: marks
	p.srv.SweepMetrics()
	if p.has("switchboard_http_request_duration_seconds", slowSeries) {
		t.Fatal("the removed route's series outlived its last request by two sweeps")
	}
}
