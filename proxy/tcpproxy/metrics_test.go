package tcpproxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// seriesCount is the number of series c exposes.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for range ch {
		n++
	}
	return n
}

func setGrace(m *Metrics, d time.Duration) { m.refs.SetGrace(d) }

// listenOn starts a listener named name on m, shut down at the end of the
// test if nothing did before.
func listenOn(t *testing.T, m *Metrics, name string, up *testUpstream, cfg Config) (*Listener, string) {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Upstream = name, up.name
	l, err := NewListener(ln, cfg, func(string) Upstream { return up }, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go l.Serve()
	t.Cleanup(func() { shutdownNow(t, l) })
	return l, ln.Addr().String()
}

func shutdownNow(t *testing.T, l *Listener) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Shutdown(ctx); err != nil {
		t.Errorf("shutdown %s: %v", l.name, err)
	}
}

// An endpoint that discovery (here: Pool.Update) took away loses its
// series once the endpoint table prunes it and the grace has passed, so
// a churning fleet keeps /metrics bounded; the current endpoint keeps its
// series.
func TestSeriesOfEndpointsThatLeftAreDeleted(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	setGrace(m, 0)
	up := newUpstream(t, "app", rr())
	_, addr := listenOn(t, m, "db", up, Config{ConnectAttempts: 1})
	const churn = 300
	var last string
	for i := range churn {
		last = testutil.DeadAddr(t) // nothing listens: the connect is refused
		up.pool.Update([]endpoint.Spec{{Address: last}})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, 5*time.Second) // turned away after the refused connect
		c.Close()
		if i == 0 && metricValue(m.connectErrs.WithLabelValues("db", "app", last)) != 1 {
			t.Fatal("no connect error counted for the first endpoint")
		}
	}
	testutil.WaitFor(t, 5*time.Second, "pending series deletions", func() bool { return m.refs.Pending() == 0 })
	n := seriesCount(m.connectErrs)
	if n > 2*minPruneAt || n < 2 {
		t.Fatalf("after %d endpoints came and went: %d connect-error series, want between 2 and %d", churn, n, 2*minPruneAt)
	}
	if got := metricValue(m.connectErrs.WithLabelValues("db", "app", last)); got != 1 {
		t.Fatalf("the current endpoint's connect errors = %v, want 1 (its series kept)", got)
	}
}

// A listener replaced under the same name (a new address; the old one
// draining) shares its series: the old one's end must not delete what the
// new one counts on. Once the last holder is done, the grace runs; a new
// holder within it keeps the series.
func TestListenerSeriesLiveWhileAnyHolderDoes(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	setGrace(m, 0)
	be := startServer(t, echo)
	up := newUpstream(t, "app", rr(), be.addr)
	old, oldAddr := listenOn(t, m, "db", up, Config{})
	_, newAddr := listenOn(t, m, "db", up, Config{})
	for _, a := range []string{oldAddr, newAddr} {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c, "hello")
		c.Close()
	}
	testutil.WaitFor(t, 5*time.Second, "both connections to end", func() bool {
		return metricValue(m.active.WithLabelValues("db", "app", be.addr)) == 0
	})
	shutdownNow(t, old) // the old one ends; the new one goes on
	testutil.WaitFor(t, 5*time.Second, "pending series deletions", func() bool { return m.refs.Pending() == 0 })
	if seriesCount(m.accepted) != 1 || seriesCount(m.total) != 1 {
		t.Fatalf("after the old listener's end: %d accepted and %d total series, want 1 each (the new listener's)",
			seriesCount(m.accepted), seriesCount(m.total))
	}
	c, err := net.Dial("tcp", newAddr)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "again")
	c.Close()
	testutil.WaitFor(t, 5*time.Second, "three accepted connections", func() bool {
		return metricValue(m.accepted.WithLabelValues("db")) == 3
	})
	if got := metricValue(m.total.WithLabelValues("db", "app", be.addr)); got != 3 {
		t.Fatalf("connections forwarded = %v, want 3 (counted on the shared series)", got)
	}
}

func TestSeriesGoAfterTheGraceUnlessTakenBack(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	be := startServer(t, echo)
	up := newUpstream(t, "app", rr(), be.addr)
	setGrace(m, time.Hour)
	first, _ := listenOn(t, m, "db", up, Config{})
	shutdownNow(t, first)
	if n := m.refs.Pending(); n != 1 {
		t.Fatalf("after the listener's end: %d pending deletions, want 1", n)
	}
	if seriesCount(m.accepted) != 1 {
		t.Fatal("the listener's series went before the grace")
	}
	// A listener of the same name within the grace takes them back.
	second, _ := listenOn(t, m, "db", up, Config{})
	if n := m.refs.Pending(); n != 0 {
		t.Fatalf("after a new holder: %d pending deletions, want 0", n)
	}
	setGrace(m, 0)
	shutdownNow(t, second)
	testutil.WaitFor(t, 5*time.Second, "the listener's series to go", func() bool {
		return m.refs.Pending() == 0 && seriesCount(m.accepted)+seriesCount(m.rejected)+seriesCount(m.closed)+seriesCount(m.queued) == 0
	})
}
