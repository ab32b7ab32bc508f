package httpproxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
)

// has reports whether the registry exposes a series of name whose labels
// include labels.
func (p *proxy) has(name string, labels map[string]string) bool {
	p.t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return true
		}
	}
	return false
}

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
		"kept route":            {"switchboard_http_requests_total", map[string]string{"route": "keep", "code": "200"}},
		"kept route's latency":  {"switchboard_http_request_duration_seconds", map[string]string{"route": "keep"}},
		"no route (404)":        {"switchboard_http_requests_total", map[string]string{"route": "", "code": "404"}},
		"kept listener":         {"switchboard_http_requests_in_flight", map[string]string{"listener": "web"}},
		"moved route, new pair": {"switchboard_http_request_duration_seconds", map[string]string{"route": "moved", "upstream": "third"}},
	}
	gone := map[string]series{
		"removed route":               {"switchboard_http_requests_total", map[string]string{"route": "gone"}},
		"removed route's latency":     {"switchboard_http_request_duration_seconds", map[string]string{"route": "gone"}},
		"moved route, old pair":       {"switchboard_http_requests_total", map[string]string{"route": "moved", "upstream": "app"}},
		"removed upstream's endpoint": {"switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": dead}},
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

	// The first sweep only marks: a series outlives its owner by one
	// interval, so that scrapes see its last value.
	if n := p.srv.SweepMetrics(); n != 0 {
		t.Fatalf("first sweep after the reload deleted %d series, want 0 (grace)", n)
	}
	for what, s := range gone {
		if !p.has(s.name, s.labels) {
			t.Fatalf("after one sweep: %s series gone already", what)
		}
	}
	p.srv.SweepMetrics()
	for what, s := range gone {
		if p.has(s.name, s.labels) {
			t.Errorf("after two sweeps: %s series still there (%s %v)", what, s.name, s.labels)
		}
	}
	for what, s := range kept {
		if !p.has(s.name, s.labels) {
			t.Errorf("after two sweeps: %s series deleted (%s %v)", what, s.name, s.labels)
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
	p.srv.SweepMetrics() // marks
	apply(after)
	p.srv.SweepMetrics() // back: unmarked
	apply(withoutMoved)
	p.srv.SweepMetrics() // marks again
	if !p.has("switchboard_http_request_duration_seconds", moved) {
		t.Fatal("a route that came back between sweeps lost its series at its next removal's first sweep")
	}
	p.srv.SweepMetrics()
	if p.has("switchboard_http_request_duration_seconds", moved) {
		t.Fatal("the removed route's series survived two sweeps")
	}
}
