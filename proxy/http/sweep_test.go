package httpproxy_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
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
	b1, b2 := newBackend(t, "b1", nil), newBackend(t, "b2", nil)
	dead := deadAddr(t)
	echo := echoServer(t, "e")
	db, db2 := testutil.FreeAddr(t), testutil.FreeAddr(t)
	before := fmt.Sprintf(`shutdown_timeout: 5s
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: keep, match: {path_prefix: /keep}, upstream: app}
      - {name: gone, match: {path_prefix: /gone}, upstream: other}
  - {name: db, protocol: tcp, listen: %q, upstream: pg}
  - {name: db2, protocol: tcp, listen: %q, upstream: pg}
upstreams:
  app:
    targets: [{address: %s}, {address: %s}]
  other:
    targets: [{address: %s}]
  pg:
    targets: [{address: %s}]
`, db, db2, b1.addr(), dead, b2.addr(), echo)
	p := startProxy(t, before)
	c := &http.Client{Timeout: 5 * time.Second}
	for range 4 { // round robin: two of them meet the dead endpoint first
		get(t, c, p.url("web")+"/keep")
	}
	get(t, c, p.url("web")+"/gone")
	// One tcp connection stays open through db; one through db2 ends.
	conn, err := net.Dial("tcp", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	talk(t, conn, bufio.NewReader(conn), "hi")
	c2, err := net.Dial("tcp", db2)
	if err != nil {
		t.Fatal(err)
	}
	talk(t, c2, bufio.NewReader(c2), "hi")
	c2.Close()

	series := map[string]struct {
		name   string
		labels map[string]string
	}{
		"kept route":                  {"switchboard_http_requests_total", map[string]string{"route": "keep", "code": "200"}},
		"removed route":               {"switchboard_http_requests_total", map[string]string{"route": "gone"}},
		"removed route's latency":     {"switchboard_http_request_duration_seconds", map[string]string{"route": "gone"}},
		"removed upstream's endpoint": {"switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": dead}},
		"removed tcp listener":        {"switchboard_tcp_accepted_total", map[string]string{"listener": "db2"}},
		"endpoint left, conn open":    {"switchboard_tcp_connections_active", map[string]string{"listener": "db", "endpoint": echo}},
	}
	for what, s := range series {
		if !p.has(s.name, s.labels) {
			t.Fatalf("before the reload: no %s series (%s %v)", what, s.name, s.labels)
		}
	}

	// The reload drops route "gone", upstream "other", app's dead target,
	// tcp listener db2, and pg's only endpoint (its connection stays).
	echo2 := echoServer(t, "f")
	after := fmt.Sprintf(`shutdown_timeout: 5s
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: keep, match: {path_prefix: /keep}, upstream: app}
  - {name: db, protocol: tcp, listen: %q, upstream: pg}
upstreams:
  app:
    targets: [{address: %s}]
  pg:
    targets: [{address: %s}]
`, db, b1.addr(), echo2)
	cfg, err := config.Parse("after.yaml", []byte(after))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}

	// The first sweep only marks: a series outlives its owner by one
	// interval, so that scrapes see its last value.
	if n := p.srv.SweepMetrics(); n != 0 {
		t.Fatalf("first sweep after the reload deleted %d series, want 0 (grace)", n)
	}
	for what, s := range series {
		if !p.has(s.name, s.labels) {
			t.Fatalf("after one sweep: %s series gone already", what)
		}
	}
	if n := p.srv.SweepMetrics(); n == 0 {
		t.Fatal("second sweep deleted nothing")
	}
	for what, s := range series {
		want := what == "kept route" || what == "endpoint left, conn open"
		if got := p.has(s.name, s.labels); got != want {
			t.Errorf("after two sweeps: %s series present = %v, want %v", what, got, want)
		}
	}
	// The open connection still counts on its series.
	if v := p.metric("switchboard_tcp_connections_active", map[string]string{"listener": "db", "endpoint": echo}); v != 1 {
		t.Fatalf("active connections to the removed endpoint = %v, want 1", v)
	}

	// Once that connection ends, its endpoint's series go too.
	conn.Close()
	testutil.WaitFor(t, 5*time.Second, "the tcp connection to end", func() bool {
		return p.metric("switchboard_tcp_connections_active", map[string]string{"listener": "db", "endpoint": echo}) == 0
	})
	p.srv.SweepMetrics()
	p.srv.SweepMetrics()
	if p.has("switchboard_tcp_connections_active", map[string]string{"listener": "db", "endpoint": echo}) {
		t.Fatal("the removed endpoint's tcp series survived two sweeps after its last connection ended")
	}
	if !p.has("switchboard_http_requests_total", map[string]string{"route": "keep"}) {
		t.Fatal("the kept route's series went")
	}
}
