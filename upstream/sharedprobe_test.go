package upstream_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/upstream"
)

// probeLog records when a backend received each probe, by path.
type probeLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (l *probeLog) times(path string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[path]...)
}

func probedBackend(t *testing.T) (string, *probeLog) {
	t.Helper()
	l := &probeLog{at: map[string][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.at[r.URL.Path] = append(l.at[r.URL.Path], time.Now())
		l.mu.Unlock()
	}))
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
	// start after it; five intervals of quiet confirm it at the backend.
	seen, seenOther := len(backend.times("/healthz")), len(backend.times("/other"))
	quiet := time.NewTimer(5 * interval)
	defer quiet.Stop()
	<-quiet.C
	if got, gotOther := len(backend.times("/healthz")), len(backend.times("/other")); got != seen || gotOther != seenOther {
		t.Fatalf("probes went on after every upstream closed: /healthz %d -> %d, /other %d -> %d", seen, got, seenOther, gotOther)
	}
}
