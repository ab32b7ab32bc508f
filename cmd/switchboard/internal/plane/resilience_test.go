package plane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
)

func TestRouteBreakerOpensThenFallbackAnswersWithoutTheUpstream(t *testing.T) {
	var hits atomic.Int64
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "down", 500)
	})
	p := startProxy(t, limitYAML(`        breaker: {window_size: 10, min_requests: 4, failure_rate: 0.5, open_for: 1m}
        fallback:
          on: [breaker_open]
          steps: [{type: static, status: 200, body: "served by the fallback"}]`, b.addr()))
	for i := 0; i < 4; i++ {
		if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 500 {
			t.Fatalf("request %d: %d, want the upstream's 500 while the breaker is closed", i, resp.StatusCode)
		}
	}
	// min_requests (4) failures at a 100% rate: open. From now on the
	// fallback answers and the upstream sees nothing.
	for i := 0; i < 5; i++ {
		resp, body := doGet(t, p.url("web")+"/", nil)
		if resp.StatusCode != 200 || body != "served by the fallback" || resp.Header.Get("X-Switchboard-Degraded") != "static: breaker_open" {
			t.Fatalf("open breaker: %d %q degraded %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
		}
	}
	if n := hits.Load(); n != 4 {
		t.Fatalf("upstream got %d requests, want exactly min_requests 4", n)
	}
	if got := p.metric("switchboard_breaker_state", map[string]string{"route": "api"}); got != 1 {
		t.Fatalf("switchboard_breaker_state = %v, want 1 (open)", got)
	}
	if got := p.metric("switchboard_fallback_responses_total", map[string]string{"route": "api", "step": "static", "reason": "breaker_open"}); got != 5 {
		t.Fatalf("fallback responses = %v", got)
	}
}

func TestRouteBreakerWithoutFallbackAnswers503(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusBadGateway) })
	p := startProxy(t, limitYAML(`        breaker: {window_size: 4, min_requests: 2, consecutive_failures: 2, open_for: 1m}`, b.addr()))
	doGet(t, p.url("web")+"/", nil)
	doGet(t, p.url("web")+"/", nil)
	resp, _ := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Switchboard-Error") != "breaker_open" {
		t.Fatalf("open breaker without fallback: %d %q", resp.StatusCode, resp.Header.Get("X-Switchboard-Error"))
	}
}

func TestStaleFallbackServesTheLastGoodBody(t *testing.T) {
	var fail atomic.Bool
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("last good " + r.URL.Path))
	})
	p := startProxy(t, limitYAML(`        fallback:
          on: [status:503]
          steps: [{type: stale, max_age: 1m}]`, b.addr()))
	if _, body := doGet(t, p.url("web")+"/item", nil); body != "last good /item" {
		t.Fatal(body)
	}
	fail.Store(true)
	resp, body := doGet(t, p.url("web")+"/item", nil)
	if resp.StatusCode != 200 || body != "last good /item" || resp.Header.Get("X-Switchboard-Degraded") != "stale: status:503" {
		t.Fatalf("stale: %d %q degraded %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
	// Nothing stored for another path: the upstream's answer goes through.
	if resp, _ := doGet(t, p.url("web")+"/other", nil); resp.StatusCode != 503 {
		t.Fatalf("no stale entry: %d, want the upstream's 503", resp.StatusCode)
	}
}

func TestFallbackOnNoHealthyEndpoint(t *testing.T) {
	b := newBackend(t, "b", nil)
	p := startProxy(t, limitYAML(`        fallback:
          on: [no_healthy_endpoint]
          steps: [{type: static, status: 200, headers: {Content-Type: text/plain}, body: "maintenance"}]`, b.addr()))
	for _, ep := range p.upstream("app").Pool().Snapshot().All {
		ep.SetStatus(endpoint.Unhealthy, "test", time.Now())
	}
	p.upstream("app").Pool().Refresh()
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 200 || body != "maintenance" || !strings.HasPrefix(resp.Header.Get("X-Switchboard-Degraded"), "static: no_healthy_endpoint") {
		t.Fatalf("%d %q %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
}

// statusBackend answers every request with status (200: its name).
func statusBackend(t *testing.T, name string, status int, hits *atomic.Int64) *backend {
	return newBackend(t, name, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		if status != 200 {
			http.Error(w, name+" failing", status)
			return
		}
		io.WriteString(w, name)
	})
}

func TestRetryOnStatusGoesToAnotherEndpoint(t *testing.T) {
	var badHits, goodHits atomic.Int64
	bad := statusBackend(t, "bad", http.StatusServiceUnavailable, &badHits)
	good := statusBackend(t, "good", 200, &goodHits)
	p := startProxy(t, limitYAML(`        retry: {attempts: 2, statuses: [503], backoff_base: 1ms, backoff_max: 2ms}`, bad.addr()+"}, {address: "+good.addr()))
	for i := 0; i < 6; i++ {
		if resp, body := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 || body != "good" {
			t.Fatalf("request %d: %d %q; a 503 must be retried on the other endpoint", i, resp.StatusCode, body)
		}
	}
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "status"}); got != float64(badHits.Load()) {
		t.Fatalf("status retries %v, bad endpoint hits %d", got, badHits.Load())
	}
}

func TestPostIsRetriedOnlyWithIdempotencyKey(t *testing.T) {
	var badHits, goodHits atomic.Int64
	bad := statusBackend(t, "bad", http.StatusServiceUnavailable, &badHits)
	good := statusBackend(t, "good", 200, &goodHits)
	// Round robin starts at bad: every first attempt fails.
	p := startProxy(t, limitYAML(`        retry: {attempts: 2, statuses: [503], backoff_base: 1ms, backoff_max: 2ms}`, bad.addr()+"}, {address: "+good.addr()))
	post := func(key string) (int, string) {
		req, _ := http.NewRequest("POST", p.url("web")+"/orders", strings.NewReader(`{"item": 1}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, _ := post(""); code != 503 || badHits.Load() != 1 || goodHits.Load() != 0 {
		t.Fatalf("POST without Idempotency-Key: %d, bad %d good %d; it must not be re-sent", code, badHits.Load(), goodHits.Load())
	}
	if code, body := post("k-1"); code != 200 || body != "good" {
		t.Fatalf("POST with Idempotency-Key: %d %q; it may be retried", code, body)
	}
}

// TestPostWhoseConnectionBreaksDuringItsBodyIsRetried: an endpoint that
// resets the connection while a POST's body is still being sent is the
// endpoint's failure. With an Idempotency-Key and a body within
// body_limit, the POST goes to another endpoint, whole. (It was answered
// 400 bad_request, "could not read the request body", as if the client's
// body had failed, and never retried.)
func TestPostWhoseConnectionBreaksDuringItsBodyIsRetried(t *testing.T) {
	// The first endpoint reads the request's head and resets the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reset := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			http.ReadRequest(bufio.NewReader(c))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			select {
			case reset <- struct{}{}:
			default:
			}
		}
	}()
	echo := newBackend(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "echo %s", b)
	})
	// Round robin starts at the first target.
	p := startProxy(t, limitYAML(`        retry: {attempts: 2, retry_on: [reset], backoff_base: 1ms, backoff_max: 2ms}`, ln.Addr().String()+"}, {address: "+echo.addr()))

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", p.url("web")+"/orders", pr)
	req.ContentLength = int64(len("first,second"))
	req.Header.Set("Idempotency-Key", "k-1")
	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), nil}
	}()
	pw.Write([]byte("first,"))
	select {
	case <-reset:
	case <-time.After(5 * time.Second):
		t.Fatal("the first endpoint never saw the request's head")
	}
	// The rest of the body meets the reset connection.
	pw.Write([]byte("second"))
	pw.Close()
	r := <-done
	if r.err != nil || r.code != 200 || r.body != "echo first,second" {
		t.Fatalf("POST: %d %q %v; want the body retried whole on the other endpoint", r.code, r.body, r.err)
	}
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "reset"}); got != 1 {
		t.Fatalf("reset retries: %v, want 1", got)
	}
}

func TestRetryBudgetBoundsAttemptsWhenEverythingFails(t *testing.T) {
	var hits atomic.Int64
	a := statusBackend(t, "a", http.StatusServiceUnavailable, &hits)
	b := statusBackend(t, "b", http.StatusServiceUnavailable, &hits)
	p := startProxy(t, limitYAML(`        retry: {attempts: 3, statuses: [503], backoff_base: 1ms, backoff_max: 1ms, budget_percent: 20, budget_window: 10s, min_retries_per_second: 0.1}`, a.addr()+"}, {address: "+b.addr()))
	const n = 8
	const requests = 200
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < requests/n; i++ {
				resp, err := http.Get(p.url("web") + "/")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	// At most (1 + 0.2) x requests, plus the floor's 0.1/s x 10 s = 1.
	if got, bound := hits.Load(), int64(1.2*requests)+1; got > bound {
		t.Fatalf("%d upstream attempts for %d requests; the budget allows at most %d", got, requests, bound)
	}
	if hits.Load() <= requests {
		t.Fatalf("no retry at all (%d attempts): the budget should allow some", hits.Load())
	}
}

// TestCompositionRateLimitBreakerRetryFallback pins the order of one
// route's protections: rate limit, then breaker, then retry, then fallback.
func TestCompositionRateLimitBreakerRetryFallback(t *testing.T) {
	var hits atomic.Int64
	b := statusBackend(t, "b", http.StatusServiceUnavailable, &hits)
	p := startProxy(t, limitYAML(`        rate_limit: [{name: cap, rate: 1/h, burst: 7}]
        breaker: {window_size: 10, min_requests: 3, failure_rate: 0.5, open_for: 1h}
        retry: {attempts: 2, statuses: [503], backoff_base: 1ms, backoff_max: 1ms}
        fallback:
          on: [breaker_open, status:503]
          steps: [{type: static, status: 200, body: sorry}]`, b.addr()))
	var got []string
	for i := 0; i < 8; i++ {
		resp, body := doGet(t, p.url("web")+"/", nil)
		got = append(got, fmt.Sprintf("%d %s %s", resp.StatusCode, strings.TrimSpace(body), resp.Header.Get("X-Switchboard-Degraded")))
	}
	want := []string{
		// Three requests reach the upstream twice each (the retry), then
		// the fallback answers for the 503; the breaker counts each as a
		// failure, and three failures open it.
		"200 sorry static: status:503", "200 sorry static: status:503", "200 sorry static: status:503",
		// Open: the fallback answers without an upstream call.
		"200 sorry static: breaker_open", "200 sorry static: breaker_open", "200 sorry static: breaker_open", "200 sorry static: breaker_open",
		// The rate limit comes first of all: the 8th request is over its burst of 7.
		`429 {"error":"rate limit cap of route api exceeded","code":"rate_limited"} `,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if hits.Load() != 6 {
		t.Fatalf("upstream attempts %d, want 6 (3 requests x 2 attempts)", hits.Load())
	}
}

func TestRouteBreakerProbesAfterOpenForAndClosesWhenTheBackendRecovers(t *testing.T) {
	var hits atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	})
	p := startProxy(t, limitYAML(`        breaker: {window_size: 10, min_requests: 4, failure_rate: 0.5, open_for: 200ms, half_open_probes: 3}`, b.addr()))
	for i := 0; i < 4; i++ {
		doGet(t, p.url("web")+"/", nil)
	}
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 503 || hits.Load() != 4 {
		t.Fatalf("open: %d with %d upstream hits, want 503 and 4", resp.StatusCode, hits.Load())
	}
	failing.Store(false)
	time.Sleep(250 * time.Millisecond) // letting open_for pass: time itself is what is tested
	for i := 0; i < 3; i++ {
		if resp, body := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("probe %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if got := p.metric("switchboard_breaker_state", map[string]string{"route": "api"}); got != 0 {
		t.Fatalf("after 3 good probes the breaker is %v, want 0 (closed)", got)
	}
	for i := 0; i < 5; i++ {
		if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("traffic after closing: %d", resp.StatusCode)
		}
	}
	if hits.Load() != 4+3+5 {
		t.Fatalf("upstream hits %d, want 12", hits.Load())
	}
	for _, to := range []string{"open", "half-open", "closed"} {
		if got := p.metric("switchboard_breaker_transitions_total", map[string]string{"route": "api", "to": to}); got != 1 {
			t.Errorf("transitions to %s: %v, want 1", to, got)
		}
	}
}

func TestEndpointBreakerTakesAnEndpointOutAndBack(t *testing.T) {
	a, b, c := newRestartable(t, "a"), newRestartable(t, "b"), newRestartable(t, "c")
	b.fail.Store(true)
	p := startProxy(t, strings.Replace(healthYAML(`      panic_threshold: 0`, a.addr, b.addr, c.addr),
		"    health:", "    breaker: {window_size: 10, min_requests: 3, failure_rate: 0.5, open_for: 300ms, half_open_probes: 1}\n    health:", 1))
	for i := 0; i < 9; i++ {
		doGet(t, p.url("web")+"/", nil) // b answers its three with 500
	}
	st := p.waitState(b.addr, time.Second, endpoint.BreakerOpen)
	if !strings.Contains(st.Reason, "open") {
		t.Fatalf("reason %q", st.Reason)
	}
	hits := b.hits.Load()
	for i := 0; i < 6; i++ {
		if resp, body := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 || body == "b" {
			t.Fatalf("request %d while b's breaker is open: %d %q", i, resp.StatusCode, body)
		}
	}
	if b.hits.Load() != hits {
		t.Fatal("picks did not skip the endpoint whose breaker is open")
	}
	b.fail.Store(false)
	// After open_for the breaker turns half-open on its own tick and the
	// endpoint takes traffic again; one good probe closes it.
	p.waitState(b.addr, 3*time.Second, endpoint.Healthy)
	for i := 0; i < 6; i++ {
		doGet(t, p.url("web")+"/", nil)
	}
	if b.hits.Load() == hits {
		t.Fatal("b took no traffic after its breaker let it back")
	}
	if st := p.endpointOf(b.addr).Status(); st.State != endpoint.Healthy {
		t.Fatalf("b: %s (%s)", st.State, st.Reason)
	}
}

func TestBackupUpstreamAnswersWhenThePrimaryFails(t *testing.T) {
	var hits atomic.Int64
	primary := statusBackend(t, "primary", http.StatusServiceUnavailable, &hits)
	backup := newBackend(t, "backup", nil)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: api
        match: {path_prefix: /}
        upstream: app
        fallback:
          on: [status:503]
          steps: [{type: backup, upstream: spare}]
upstreams:
  app:
    targets: [{address: `+primary.addr()+`}]
  spare:
    targets: [{address: `+backup.addr()+`}]
`)
	resp, body := doGet(t, p.url("web")+"/x", nil)
	if resp.StatusCode != 200 || body != "backup" || resp.Header.Get("X-Switchboard-Degraded") != "backup: status:503" {
		t.Fatalf("%d %q degraded %q", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
}

func TestHedgedRequestTakesTheFirstAnswer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var slowCanceled atomic.Bool
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			slowCanceled.Store(true)
			return
		}
		io.WriteString(w, "slow")
	})
	fast := newBackend(t, "fast", nil)
	p := startProxy(t, limitYAML(`        retry: {attempts: 2, hedge_after: 30ms}`, slow.addr()+"}, {address: "+fast.addr()))
	// Round robin sends the first attempt to slow, which never answers in
	// time: the hedge to fast wins.
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 200 || body != "fast" {
		t.Fatalf("%d %q, want the hedge's answer", resp.StatusCode, body)
	}
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "hedge"}); got != 1 {
		t.Fatalf("hedges counted: %v", got)
	}
	// The losing attempt is cancelled: the slow backend sees its client go.
	deadline := time.Now().Add(5 * time.Second)
	for !slowCanceled.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the losing attempt was not cancelled")
		}
		time.Sleep(5 * time.Millisecond) // polling a flag set by another goroutine
	}
}

// TestRouteStateSurvivesARebuild: a reload (or an auto-route change) that
// keeps a route's breaker settings keeps its breaker: an open breaker stays
// open instead of sending traffic back to a failing upstream; changed
// settings build a new one.
func TestRouteStateSurvivesARebuild(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusBadGateway) })
	yaml := limitYAML(`        breaker: {window_size: 4, min_requests: 2, consecutive_failures: 2, open_for: 1m}`, b.addr())
	p := startProxy(t, yaml)
	doGet(t, p.url("web")+"/", nil)
	doGet(t, p.url("web")+"/", nil)
	apply := func(y string) {
		t.Helper()
		cfg, err := config.Parse("same.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatal(err)
		}
	}
	apply(yaml)
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.Header.Get("X-Switchboard-Error") != "breaker_open" {
		t.Fatalf("after a rebuild with the same settings the open breaker let a request through: %d", resp.StatusCode)
	}
	apply(limitYAML(`        breaker: {window_size: 4, min_requests: 2, consecutive_failures: 3, open_for: 1m}`, b.addr()))
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 502 {
		t.Fatalf("new breaker settings kept the old open breaker: %d %q", resp.StatusCode, resp.Header.Get("X-Switchboard-Error"))
	}
}

// TestFailedConnectIsRetriedEvenWhenItEjectsTheEndpoint is issue 14's bug:
// with one dead target of two, passive health and no retry block, the
// request whose failure ejected the dead endpoint was answered 502 (the
// check for "another ready endpoint" ran after the ejection had emptied
// the set of others). A failed connect is retried on another endpoint
// whatever the health settings.
func TestFailedConnectIsRetriedEvenWhenItEjectsTheEndpoint(t *testing.T) {
	live := newBackend(t, "live", nil)
	p := startProxy(t, upstreamYAML("    health: {passive: {consecutive_failures: 3}}\n", deadAddr(t), live.addr()))
	var statuses []int
	for i := 0; i < 10; i++ {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/")
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode != 200 || body != "live" {
			t.Fatalf("request %d: %d %q; statuses so far %v, want every one 200 from the live endpoint", i, resp.StatusCode, body, statuses)
		}
	}
	if st := p.upstream("app").Pool().Snapshot().All[0].State(); st != endpoint.Ejected {
		t.Fatalf("the dead endpoint is %s, want ejected after its third failed connect", st)
	}
}
