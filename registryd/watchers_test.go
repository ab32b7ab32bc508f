package registryd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// watcherFleet is n HTTP clients, each parked in a blocking
// GET /v1/health/service/:service on its own connection, re-arming with the
// new index after every wake-up.
type watcherFleet struct {
	n       int
	woke    []time.Time
	index   []uint64
	rounds  chan int // a watcher's id, sent after each wake-up
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	client  *http.Client
	errs    chan error
	release []chan struct{}
}

func startWatchers(tb testing.TB, s *Server, service string, n int, index uint64) *watcherFleet {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &watcherFleet{
		n: n, woke: make([]time.Time, n), index: make([]uint64, n),
		rounds: make(chan int, n), cancel: cancel, errs: make(chan error, n),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}},
	}
	url := baseURL(s) + "/v1/health/service/" + service
	for i := range n {
		f.index[i] = index
		ch := make(chan struct{}, 1)
		f.release = append(f.release, ch)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"?wait=60s&index="+strconv.FormatUint(f.index[i], 10), nil)
				resp, err := f.client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						f.errs <- err
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				now := time.Now()
				idx, err := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
				if resp.StatusCode != http.StatusOK || err != nil {
					f.errs <- fmt.Errorf("watcher %d: status %d, index %q", i, resp.StatusCode, resp.Header.Get("X-Consul-Index"))
					return
				}
				f.woke[i], f.index[i] = now, idx
				f.rounds <- i
				select { // the next round starts when the fleet says so
				case <-ch:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	tb.Cleanup(f.stop)
	return f
}

func (f *watcherFleet) stop() {
	f.cancel()
	f.wg.Wait()
	f.client.CloseIdleConnections()
}

// parked waits until the server counts all n queries as blocked.
func (f *watcherFleet) parked(tb testing.TB, s *Server) {
	tb.Helper()
	testutil.WaitFor(tb, 30*time.Second, fmt.Sprintf("%d watchers park on the server", f.n), func() bool {
		select {
		case err := <-f.errs:
			tb.Fatalf("watcher failed: %v", err)
		default:
		}
		return s.blocking.Load() == int64(f.n)
	})
}

// collect waits for every watcher to wake once and returns the wake-up
// latencies measured from changed.
func (f *watcherFleet) collect(tb testing.TB, changed time.Time, within time.Duration) []time.Duration {
	tb.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	lat := make([]time.Duration, 0, f.n)
	for len(lat) < f.n {
		select {
		case i := <-f.rounds:
			lat = append(lat, f.woke[i].Sub(changed))
		case err := <-f.errs:
			tb.Fatalf("watcher failed: %v", err)
		case <-timeout.C:
			tb.Fatalf("only %d of %d watchers woke within %v of the change", len(lat), f.n, within)
		}
	}
	return lat
}

// next lets every watcher re-arm with the index it last saw.
func (f *watcherFleet) next() {
	for _, ch := range f.release {
		ch <- struct{}{}
	}
}

func TestThousandWatchersAllWakeOnAChange(t *testing.T) {
	const n = 1000
	s := startServer(t, Config{})
	put := func(path, body string) {
		t.Helper()
		if code, b, _ := do(t, http.MethodPut, baseURL(s)+path, body); code != 200 {
			t.Fatalf("PUT %s: %d %s", path, code, b)
		}
	}
	put("/v1/agent/service/register", `{"Name":"hot","ID":"hot-1","Check":{"TTL":"1m"}}`)
	_, _, hdr := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/hot", "")
	idx := headerIndex(t, hdr)
	f := startWatchers(t, s, "hot", n, idx)
	f.parked(t, s)

	// A change to another service wakes none of them.
	put("/v1/agent/service/register", `{"Name":"cold","ID":"cold-1"}`)
	select {
	case i := <-f.rounds:
		t.Fatalf("watcher %d of hot woke on a change to cold", i)
	default:
	}
	if got := s.blocking.Load(); got != n {
		t.Fatalf("%d watchers still parked after a change to another service, want %d", got, n)
	}

	changed := time.Now()
	put("/v1/agent/check/pass/service:hot-1", "")
	lat := f.collect(t, changed, 20*time.Second)
	for i, got := range f.index {
		if got <= idx {
			t.Fatalf("watcher %d woke with index %d, not past %d", i, got, idx)
		}
	}
	slices.Sort(lat)
	t.Logf("%d watchers woke: p50 %v, p99 %v, max %v", n, lat[n/2], lat[n*99/100], lat[n-1])
}

// BenchmarkBlockingWatchers measures 1,000 HTTP blocking watchers on one
// service: the memory each costs (client and server, both in this process),
// and how long after a change they wake (p50/p99 across all wake-ups).
func BenchmarkBlockingWatchers(b *testing.B) {
	const n = 1000
	s := startServer(b, Config{})
	if code, body, _ := do(b, http.MethodPut, baseURL(s)+"/v1/agent/service/register", `{"Name":"hot","ID":"hot-1","Check":{"TTL":"1h"}}`); code != 200 {
		b.Fatalf("register: %d %s", code, body)
	}
	_, _, hdr := do(b, http.MethodGet, baseURL(s)+"/v1/health/service/hot", "")
	idx := headerIndex(b, hdr)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	f := startWatchers(b, s, "hot", n, idx)
	f.parked(b, s)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perWatcher := float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse) / n
	goroutines := float64(runtime.NumGoroutine()-g0) / n

	status := []string{"warn", "pass"}
	var all []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			f.next()
			f.parked(b, s)
		}
		changed := time.Now()
		if code, body, _ := do(b, http.MethodPut, baseURL(s)+"/v1/agent/check/"+status[i%2]+"/service:hot-1", ""); code != 200 {
			b.Fatalf("update: %d %s", code, body)
		}
		all = append(all, f.collect(b, changed, 30*time.Second)...)
	}
	b.StopTimer()
	slices.Sort(all)
	b.ReportMetric(perWatcher, "B/watcher")
	b.ReportMetric(goroutines, "goroutines/watcher")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-wake-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-wake-ms")
}
