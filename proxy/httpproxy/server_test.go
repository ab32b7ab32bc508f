package httpproxy

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestReplacedTableIsNotKept: a routing table that a reload replaced is
// garbage once no request runs on it, while the sweep still learns the
// labels of its series until the sweep after. (Each replaced table was kept
// whole until then, with its routes' pipelines and series caches — about
// 5 KiB a route, more with a stale cache — so a reload a second held some
// ten minutes of tables.)
func TestReplacedTableIsNotKept(t *testing.T) {
	u, err := upstream.New("u", upstream.Config{Targets: []endpoint.Spec{{Address: "a:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()))
	defer s.Shutdown()
	apply := func(route string) {
		t.Helper()
		yaml := fmt.Sprintf(`listeners:
  - name: web
    listen: 127.0.0.1:0
    routes: [{name: %s, upstream: u}]
upstreams:
  u: {targets: [{address: a:1}]}
`, route)
		cfg, err := config.Parse("test.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Prepare(cfg, func(name string) *pipeline.Route {
			p, err := pipeline.New(name, pipeline.Config{}, u, &statusTransport{status: 200})
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Commit()
	}
	apply("first")
	collected := make(chan struct{})
	s.mu.Lock()
	runtime.AddCleanup(s.listeners["web"].handler.tbl.Load(), func(ch chan struct{}) { close(ch) }, collected)
	s.mu.Unlock()
	apply("second")

	var routes []string
	s.Series(time.Time{}, func(listener, route, upstream string) { routes = append(routes, route) })
	slices.Sort(routes)
	if want := []string{"", "", "first", "second"}; !slices.Equal(routes, want) {
		t.Fatalf("series after the reload: routes %q, want %q (the replaced table's too, until the next sweep)", routes, want)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		select {
		case <-collected:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the replaced routing table is still reachable after the reload")
		}
		time.Sleep(10 * time.Millisecond) // polling the collector: there is no event until it runs
	}
}

// TestActivityIsIdleOnlyWhenEveryStartedRequestEnded: a table's count of
// requests being served, whose starts and ends land on the shards of the
// CPUs that serve them, is idle exactly when as many ended as started.
func TestActivityIsIdleOnlyWhenEveryStartedRequestEnded(t *testing.T) {
	a := newActivity()
	if !a.idle() {
		t.Fatal("a new table is not idle")
	}
	a.started.AddAt(0, 1) // starts on one CPU
	a.started.AddAt(1, 1)
	if a.idle() {
		t.Fatal("idle with two requests running")
	}
	a.ended.AddAt(1, 1) // the first ends on another
	if a.idle() {
		t.Fatal("idle with one request running")
	}
	a.end()
	if !a.idle() {
		t.Fatal("not idle once both ended")
	}
	a.begin()
	if a.idle() {
		t.Fatal("idle with a request begun")
	}
}
