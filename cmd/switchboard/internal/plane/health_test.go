package plane_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// restartable is a backend that can be stopped and started again on the
// same address.
type restartable struct {
	name  string
	addr  string
	hits  atomic.Int64
	mu    sync.Mutex
	srv   *http.Server
	delay atomic.Int64 // nanoseconds each answer waits
	fail  atomic.Bool  // answer 500
}

func newRestartable(t *testing.T, name string) *restartable {
	r := &restartable{name: name}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if d := time.Duration(r.delay.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-req.Context().Done():
			}
		}
		if r.fail.Load() {
			http.Error(w, "failing", 500)
			return
		}
		io.WriteString(w, r.name)
	})}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
}

// stop closes the listener (new connections are refused), closes idle
// connections and lets requests in progress finish, as a process that is
// shut down does.
func (r *restartable) stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
}

func (r *restartable) start(t *testing.T) {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatalf("restart %s on %s: %v", r.name, r.addr, err)
	}
	r.serve(ln)
}

// upstream returns the running upstream of that name.
func (p *proxy) upstream(name string) *plane.Upstream {
	for _, u := range p.srv.Upstreams() {
		if u.Name() == name {
			return u
		}
	}
	p.t.Fatalf("no upstream %q", name)
	return nil
}

// endpointOf returns the endpoint at addr in upstream "app".
func (p *proxy) endpointOf(addr string) *endpoint.Endpoint {
	for _, ep := range p.upstream("app").Pool().Snapshot().All {
		if ep.Address() == addr {
			return ep
		}
	}
	p.t.Fatalf("no endpoint %s", addr)
	return nil
}

// waitState waits, without sleeping, until the endpoint at addr is in one
// of states (the pool publishes every state change).
func (p *proxy) waitState(addr string, timeout time.Duration, states ...endpoint.State) endpoint.Status {
	p.t.Helper()
	changed := make(chan struct{}, 1)
	cancel := p.upstream("app").Pool().Subscribe(func(*endpoint.Set) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer cancel()
	deadline := time.After(timeout)
	for {
		st := p.endpointOf(addr).Status()
		for _, s := range states {
			if st.State == s {
				return st
			}
		}
		select {
		case <-changed:
		case <-deadline:
			p.t.Fatalf("endpoint %s still %s (%s) after %v, want one of %v", addr, st.State, st.Reason, timeout, states)
		}
	}
}

func healthYAML(health string, targets ...string) string {
	return upstreamYAML("    health:\n"+health+"\n", targets...)
}

// TestBackendDeathUnderLoadIsInvisible is the 3 a.m. story: one of three
// backends dies during a 20 s load of 32 concurrent clients. GETs see no
// error (the connect failure is retried elsewhere), the dead endpoint gets
// no request once it is out, and when it comes back it is in rotation again
// within rise x interval.
func TestBackendDeathUnderLoadIsInvisible(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s load test")
	}
	a, b, c := newRestartable(t, "a"), newRestartable(t, "b"), newRestartable(t, "c")
	// max_backoff keeps the dead host's probes at most 200ms apart, so that
	// its return is seen within rise x interval plus one backoff.
	p := startProxy(t, healthYAML(`      active: {type: tcp, interval: 100ms, allow_fast: true, timeout: 50ms, rise: 2, fall: 2, jitter: 0.1, max_backoff: 200ms}
      passive: {consecutive_failures: 3, base_ejection: 30s}`, a.addr, b.addr, c.addr))

	const clients, loadFor = 32, 20 * time.Second
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer cl.CloseIdleConnections()
			for n := 0; n < 1_000_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := cl.Get(p.url("web") + "/")
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, body))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	loadDone := time.After(loadFor)

	// Let the load settle, then kill b.
	for ok.Load() < 500 {
		select {
		case <-loadDone:
			t.Fatal("no load")
		default:
			time.Sleep(5 * time.Millisecond) // pacing the driver, not waiting for an event
		}
	}
	b.stop()
	killed := time.Now()
	out := p.waitState(b.addr, 5*time.Second, endpoint.Ejected, endpoint.Unhealthy)
	t.Logf("b out %v after the kill: %s (%s)", time.Since(killed).Round(time.Millisecond), out.State, out.Reason)
	epB := p.endpointOf(b.addr)
	// Picks made before the ejection may still be finishing; count from
	// when they are done.
	for deadline := time.Now().Add(time.Second); epB.InFlight() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling a counter: there is no event for it
	}
	attemptsAtEjection := epB.Requests() + uint64(epB.InFlight())

	// Some seconds of load with b dead.
	time.Sleep(5 * time.Second) // the load runs meanwhile; nothing to wait for
	if got := epB.Requests() + uint64(epB.InFlight()); got != attemptsAtEjection {
		t.Errorf("the dead endpoint got %d attempts after it was taken out", got-attemptsAtEjection)
	}

	// b comes back: in rotation again within rise x interval (200ms; the
	// passing checks end its ejection early), with slack for a loaded
	// machine.
	b.start(t)
	back := time.Now()
	p.waitState(b.addr, time.Second, endpoint.Healthy, endpoint.Probation)
	t.Logf("b back in rotation %v after its restart", time.Since(back).Round(time.Millisecond))
	hitsBack := b.hits.Load()
	<-loadDone
	close(stop)
	wg.Wait()
	if b.hits.Load() == hitsBack {
		t.Errorf("b took no request after it came back")
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d GETs failed; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	t.Logf("%d GETs, 0 failed; a %d, b %d, c %d", ok.Load(), a.hits.Load(), b.hits.Load(), c.hits.Load())
}

func TestBackendAnswering500IsEjectedWithAReason(t *testing.T) {
	a, b, c := newRestartable(t, "a"), newRestartable(t, "b"), newRestartable(t, "c")
	b.fail.Store(true)
	p := startProxy(t, healthYAML(`      passive: {consecutive_failures: 3, failure_statuses: [500], base_ejection: 1m}`, a.addr, b.addr, c.addr))
	for i := 0; i < 9; i++ {
		doGet(t, p.url("web")+"/", nil) // b's three 500s eject it
	}
	st := p.endpointOf(b.addr).Status()
	if st.State != endpoint.Ejected || !strings.Contains(st.Reason, "3 consecutive") {
		t.Fatalf("b: %s (%s), want ejected after 3 consecutive failures", st.State, st.Reason)
	}
	hits := b.hits.Load()
	for i := 0; i < 20; i++ {
		if resp, body := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("after the ejection: %d %s", resp.StatusCode, body)
		}
	}
	if b.hits.Load() != hits {
		t.Fatalf("the ejected endpoint still got requests")
	}
	// The same state and reason through the admin API's view and metrics.
	views := admin.Views([]admin.Upstream{p.upstream("app")})
	var seen bool
	for _, e := range views[0].Endpoints {
		if e.Address == b.addr {
			seen = e.State == "ejected" && e.Reason == st.Reason
		}
	}
	if !seen || views[0].Ready != 2 {
		t.Fatalf("admin view: %+v", views[0])
	}
	if got := p.metric("switchboard_endpoint_state_changes_total", map[string]string{"upstream": "app", "endpoint": b.addr, "state": "ejected"}); got != 1 {
		t.Fatalf("state changes counted: %v", got)
	}
}

func TestSlowBackendIsEjectedAsLatencyOutlier(t *testing.T) {
	a, b, c, d := newRestartable(t, "a"), newRestartable(t, "b"), newRestartable(t, "c"), newRestartable(t, "d")
	b.delay.Store(int64(200 * time.Millisecond))
	p := startProxy(t, healthYAML(`      passive: {latency_factor: 3, min_requests: 5, window: 10s, base_ejection: 1m}`, a.addr, b.addr, c.addr, d.addr))
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				doGet(t, p.url("web")+"/", nil)
			}
		}()
	}
	wg.Wait()
	st := p.waitState(b.addr, 5*time.Second, endpoint.Ejected)
	if !strings.Contains(st.Reason, "latency") {
		t.Fatalf("b ejected for %q, want its latency", st.Reason)
	}
	for _, x := range []*restartable{a, c, d} {
		if s := p.endpointOf(x.addr).State(); s != endpoint.Healthy {
			t.Fatalf("%s is %s; only the slow endpoint may go", x.name, s)
		}
	}
}

func TestActiveCheckTakesOutAndBringsBack(t *testing.T) {
	a, b := newRestartable(t, "a"), newRestartable(t, "b")
	// A timeout well above a loaded -race run's answer time: a check that
	// timed out would judge the endpoint for the wrong reason.
	p := startProxy(t, healthYAML(`      active: {type: http, path: /healthz, interval: 250ms, allow_fast: true, timeout: 200ms, rise: 2, fall: 2}`, a.addr, b.addr))
	b.fail.Store(true)
	st := p.waitState(b.addr, 5*time.Second, endpoint.Unhealthy)
	if !strings.Contains(st.Reason, "500") {
		t.Fatalf("reason %q should name the status", st.Reason)
	}
	for i := 0; i < 6; i++ {
		if resp, body := doGet(t, p.url("web")+"/", nil); body != "a" {
			t.Fatalf("request %d went to %q (%d) while b is unhealthy", i, body, resp.StatusCode)
		}
	}
	b.fail.Store(false)
	p.waitState(b.addr, 5*time.Second, endpoint.Healthy)
}

func TestNoHealthyEndpointAndPanicMode(t *testing.T) {
	a, b := newRestartable(t, "a"), newRestartable(t, "b")
	a.fail.Store(true)
	b.fail.Store(true)
	yaml := healthYAML(`      active: {type: http, interval: 50ms, allow_fast: true, timeout: 40ms, fall: 1, rise: 1}`, a.addr, b.addr)
	p := startProxy(t, yaml)
	p.waitState(a.addr, 3*time.Second, endpoint.Unhealthy)
	p.waitState(b.addr, 3*time.Second, endpoint.Unhealthy)
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Switchboard-Error") != "no_healthy_endpoint" {
		t.Fatalf("every endpoint down: %d %s", resp.StatusCode, body)
	}

	// With a panic threshold, the proxy routes to every endpoint instead.
	p2 := startProxy(t, strings.Replace(yaml, "      active:", "      panic_threshold: 0.5\n      active:", 1))
	p2.waitState(a.addr, 3*time.Second, endpoint.Unhealthy)
	p2.waitState(b.addr, 3*time.Second, endpoint.Unhealthy)
	resp, _ = doGet(t, p2.url("web")+"/", nil)
	if resp.StatusCode != 500 {
		t.Fatalf("in panic the request must reach a (failing) endpoint: got %d", resp.StatusCode)
	}
}

// TestAdaptiveCheckIntervalStretchesAndSnapsBack measures the real gaps
// between checks of a long-healthy endpoint: they grow to max_interval, and
// the first failure brings them back to interval.
func TestAdaptiveCheckIntervalStretchesAndSnapsBack(t *testing.T) {
	checks := make(chan time.Time, 1000)
	var failNext atomic.Bool
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks <- time.Now()
			if failNext.CompareAndSwap(true, false) {
				w.WriteHeader(500)
			}
			return
		}
		io.WriteString(w, "b")
	})
	startProxy(t, healthYAML(`      active: {type: http, path: /healthz, interval: 20ms, allow_fast: true, timeout: 15ms, max_interval: 320ms, stretch_after: 2, jitter: 0, fall: 3}`, b.addr()))
	next := func() time.Time {
		select {
		case at := <-checks:
			return at
		case <-time.After(5 * time.Second):
			t.Fatal("no check within 5s")
		}
		return time.Time{}
	}
	// 20, 20, 40, 40, 80, 80, 160, 160, 320ms: after ~10 checks the gap is
	// max_interval.
	prev := next()
	var gap time.Duration
	for i := 0; i < 12; i++ {
		at := next()
		gap, prev = at.Sub(prev), at
	}
	if gap < 250*time.Millisecond || gap > 800*time.Millisecond {
		t.Fatalf("gap between checks of a long-healthy endpoint = %v, want about max_interval 320ms", gap)
	}
	failNext.Store(true)
	next() // the failing check
	next()
	a1 := next()
	a2 := next()
	if d := a2.Sub(a1); d > 150*time.Millisecond {
		t.Fatalf("after a failure the checks are %v apart, want back near interval 20ms", d)
	}
}
