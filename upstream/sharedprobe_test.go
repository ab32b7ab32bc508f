package upstream_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/upstream"
)

// probeLog records when a backend received each probe, by path, and
// which of its connections are open.
type probeLog struct {
	mu   sync.Mutex
	at   map[string][]time.Time
	srv  *httptest.Server
	open atomic.Int64 // connections the backend has not yet closed
}

// settle closes the backend's connections and waits until each has ended,
// its handler included: a probe written before its checker was stopped
// (the check is cancelled mid-flight, but its bytes are already sent) has
// been counted by then, and any later probe needs a new connection.
func (l *probeLog) settle(t *testing.T) {
	t.Helper()
	l.srv.CloseClientConnections()
	testutil.WaitFor(t, 10*time.Second, "the backend's connections to end", func() bool { return l.open.Load() == 0 })
}

func (l *probeLog) times(path string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[path]...)
}

func probedBackend(t *testing.T) (string, *probeLog) {
	t.Helper()
	l := &probeLog{at: map[string][]time.Time{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.at[r.URL.Path] = append(l.at[r.URL.Path], time.Now())
		l.mu.Unlock()
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			l.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			l.open.Add(-1)
		}
	}
	srv.Start()
	l.srv = srv
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), l
}

func checkedUpstream(t *testing.T, name, addr, path string, interval time.Duration) *upstream.Upstream {
	t.Helper()
	active := &health.ActiveConfig{Type: health.TypeHTTP, Path: path, Interval: interval, AllowFast: true,
		Timeout: interval / 2, Jitter: new(0.0), Adaptive: new(false)}
	u, err := upstream.New(name, upstream.Config{Targets: targets(addr), Health: upstream.Health{Active: active}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// TestUpstreamsOverOneBackendShareItsProbes: two upstreams with the same
// active check over one address make one probe stream at the backend, a
// third with another path its own; closing one of the two keeps the
// other's probes going, and closing every upstream stops them.
func TestUpstreamsOverOneBackendShareItsProbes(t *testing.T) {
	const interval = 100 * time.Millisecond
	addr, backend := probedBackend(t)
	a := checkedUpstream(t, "a", addr, "/healthz", interval)
	b := checkedUpstream(t, "b", addr, "/healthz", interval)
	c := checkedUpstream(t, "c", addr, "/other", interval)

	const n = 8
	testutil.WaitFor(t, 20*time.Second, "probes at the backend", func() bool {
		return len(backend.times("/healthz")) >= n && len(backend.times("/other")) >= 3
	})
	// One stream waits a whole interval after each check ends before the
	// next begins, so consecutive probes are at least an interval apart;
	// two streams (started together, without jitter) would arrive in pairs.
	probes := backend.times("/healthz")
	for i := 1; i < len(probes); i++ {
		if gap := probes[i].Sub(probes[i-1]); gap < interval {
			t.Fatalf("probes %d and %d on /healthz %v apart, less than the %v interval: more than one probe stream (arrivals %v)",
				i, i+1, gap, interval, probes)
		}
	}

	a.Close()
	seen := len(backend.times("/healthz"))
	testutil.WaitFor(t, 20*time.Second, "probes after one upstream closed", func() bool {
		return len(backend.times("/healthz")) >= seen+3
	})

	b.Close()
	c.Close()
	// Close waits for the last subscriber's stream to end, so no probe can
	// start after it; five intervals of quiet confirm it at the backend,
	// once the probes already on the wire have landed.
	backend.settle(t)
	seen, seenOther := len(backend.times("/healthz")), len(backend.times("/other"))
	quiet := time.NewTimer(5 * interval)
	defer quiet.Stop()
	<-quiet.C
	if got, gotOther := len(backend.times("/healthz")), len(backend.times("/other")); got != seen || gotOther != seenOther {
		t.Fatalf("probes went on after every upstream closed: /healthz %d -> %d, /other %d -> %d", seen, got, seenOther, gotOther)
	}
}
