package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// A backend dies while idempotent GETs pour in from several goroutines:
// no call fails (a refused connect, or a kept-alive connection that the
// dying server closed, is tried again on another endpoint), and passive
// health takes the dead endpoint out of rotation.
func TestAKilledInstanceCostsNoFailedCalls(t *testing.T) {
	a, b, dead := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "dead", nil)
	c := newClient(t, client.WithService("orders", client.Service{Upstream: upstream.Config{
		Targets: targets(a, b, dead),
		Health:  upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjection: time.Minute}},
	}}))
	hc := c.HTTPClient()

	const workers, calls = 4, 150
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		killed = make(chan struct{})
		once   sync.Once
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				if i == calls/3 {
					once.Do(func() {
						dead.srv.CloseClientConnections()
						dead.srv.Close()
						close(killed)
					})
				}
				resp, err := hc.Get("http://orders/item")
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = errors.New(resp.Status)
					}
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	<-killed
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls failed after an instance was killed, want 0; first: %s", len(failed), workers*calls, failed[0])
	}
	var deadEp *endpoint.Endpoint
	for _, ep := range c.Upstream("orders").Pool().Snapshot().All {
		if ep.Address() == dead.addr() {
			deadEp = ep
		}
	}
	if st := deadEp.State(); st.Serving() {
		t.Fatalf("the killed endpoint is %v, want it out of rotation", st)
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("hits a=%d b=%d: both survivors should have served", a.hits.Load(), b.hits.Load())
	}
}

// Failing calls open the route's breaker; from then on the fallback chain
// answers without touching the service, and the caller sees the answer
// marked degraded.
func TestAnOpenBreakerServesTheFallbackMarkedDegraded(t *testing.T) {
	sick := newBackend(t, "sick", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(sick)},
		Pipeline: pipeline.Config{
			Breaker: &breaker.Config{ConsecutiveFailures: 3, OpenFor: time.Minute},
			Fallback: &fallback.Config{Steps: []fallback.StepConfig{
				{Type: fallback.StepStatic, Status: 200, Body: "default answer", Headers: map[string]string{"Content-Type": "text/plain"}},
			}},
		},
	}))
	hc := c.HTTPClient()
	for i := 0; i < 3; i++ {
		resp, err := hc.Get("http://orders/price")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // reports the 500 to the breaker
		if resp.StatusCode != 500 {
			t.Fatalf("call %d: %d, want the service's 500 while the breaker is closed", i, resp.StatusCode)
		}
		if _, ok := client.Degraded(resp); ok {
			t.Fatalf("call %d: marked degraded, but the service answered", i)
		}
	}
	before := sick.hits.Load()
	resp, err := hc.Get("http://orders/price")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	reason, ok := client.Degraded(resp)
	if resp.StatusCode != 200 || string(body) != "default answer" || !ok || reason != "static: breaker_open" {
		t.Fatalf("with the breaker open: %d %q degraded=%v %q; want 200 \"default answer\" degraded \"static: breaker_open\"",
			resp.StatusCode, body, ok, reason)
	}
	if got := resp.Header.Get(fallback.HeaderDegraded); got != reason {
		t.Fatalf("header %s = %q, want %q", fallback.HeaderDegraded, got, reason)
	}
	if sick.hits.Load() != before {
		t.Fatalf("the service got %d calls while the breaker was open, want 0", sick.hits.Load()-before)
	}
}

// Without a fallback, a call that gets no response fails with a
// *pipeline.Error carrying the status and code the proxy would answer.
func TestAnOpenBreakerWithoutFallbackIsAPipelineError(t *testing.T) {
	sick := newBackend(t, "sick", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(sick)},
		Pipeline: pipeline.Config{Breaker: &breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Minute}},
	}))
	hc := c.HTTPClient()
	resp, err := hc.Get("http://orders/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, err = hc.Get("http://orders/")
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 503 || pe.Code != pipeline.CodeBreakerOpen {
		t.Fatalf("got %v, want a *pipeline.Error 503 %s", err, pipeline.CodeBreakerOpen)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("got %T, want http.Client's *url.Error around it", err)
	}
}

// The same hash key, from the context or from the request, always lands
// on the same instance; different keys spread.
func TestConsistentHashSendsAKeyToOneInstance(t *testing.T) {
	bs := []*backend{newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)}
	c := newClient(t, client.WithService("users", client.Service{Upstream: upstream.Config{
		Targets: targets(bs...),
		Balance: balance.Config{Policy: "consistent_hash", HashKey: "header:X-User"},
	}}))
	hc := c.HTTPClient()
	call := func(ctx context.Context, header string) string {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://users/profile", nil)
		if header != "" {
			req.Header.Set("X-User", header)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	seen := map[string]bool{}
	for u := 0; u < 30; u++ {
		key := "user-" + string(rune('a'+u%26)) + strings.Repeat("x", u)
		ctx := client.WithHashKey(context.Background(), key)
		first := call(ctx, "")
		for i := 0; i < 5; i++ {
			if got := call(ctx, ""); got != first {
				t.Fatalf("key %q went to %s and then to %s", key, first, got)
			}
			// The header names the same key: the same instance.
			if got := call(context.Background(), key); got != first {
				t.Fatalf("key %q from the header went to %s, from the context to %s", key, got, first)
			}
		}
		seen[first] = true
	}
	if len(seen) < 2 {
		t.Fatalf("30 keys all went to %v; consistent hashing should spread them", seen)
	}
}

// A call waiting in a full concurrency queue ends when its context's
// deadline passes, with the limit's error and the context's.
func TestTheContextEndsACallWaitingInTheQueue(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	slow := newBackend(t, "slow", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	})
	defer close(release)
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(slow)},
		Pipeline: pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1, Queue: 4}},
	}))
	hc := c.HTTPClient()
	go func() {
		if resp, err := hc.Get("http://orders/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://orders/", nil)
	t0 := time.Now()
	_, err := hc.Do(req)
	took := time.Since(t0)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != pipeline.CodeConcurrencyLimited || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want %s wrapping context.DeadlineExceeded", err, pipeline.CodeConcurrencyLimited)
	}
	if took > 5*time.Second {
		t.Fatalf("the queued call ended %v after it started; its deadline was 100ms", took)
	}
	if slow.hits.Load() != 1 {
		t.Fatalf("the service got %d calls, want only the first", slow.hits.Load())
	}
}

// A call waiting out a retry's backoff ends when its context is
// cancelled, without another attempt.
func TestCancellationEndsACallInItsBackoff(t *testing.T) {
	busy := newBackend(t, "busy", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	reg := prometheus.NewRegistry()
	c := newClient(t, client.WithMetrics(client.NewMetrics(reg)), client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(busy)},
		Pipeline: pipeline.Config{Retry: &retry.Policy{Attempts: 5, BackoffBase: time.Hour, BackoffMax: time.Hour}},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://orders/", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := c.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// The retry is counted as its backoff starts.
	retried := `switchboard_upstream_retries_total{reason="status",upstream="orders"}`
	testutil.WaitFor(t, 10*time.Second, "the call to start its backoff", func() bool { return gather(t, reg)[retried] == 1 })
	cancel()
	select {
	case err := <-done:
		var pe *pipeline.Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &pe) {
			t.Fatalf("got %v, want a pipeline error wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call was still in its hour-long backoff 10s after its context was cancelled")
	}
	if n := busy.hits.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1: the backoff was cut short, not waited", n)
	}
}

// Reading a response to its end, or closing it unread, finishes the call
// once: the concurrency slot comes back for the next call.
func TestReadingOrClosingTheBodyGivesTheSlotBack(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(ok)},
		Pipeline: pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1}},
	}))
	req := func() *http.Request { r, _ := http.NewRequest("GET", "http://orders/", nil); return r }

	resp, err := c.RoundTrip(req())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoundTrip(req()); err == nil {
		t.Fatal("a second call got through while the first one's body was open; want concurrency_limited")
	}
	io.ReadAll(resp.Body) // to the end, not closed
	resp2, err := c.RoundTrip(req())
	if err != nil {
		t.Fatalf("after the first body was read to its end: %v", err)
	}
	resp2.Body.Close() // unread
	resp2.Body.Close() // twice: still once
	resp.Body.Close()  // the first, read to its end, closed late: still once
	resp3, err := c.RoundTrip(req())
	if err != nil {
		t.Fatalf("after the second body was closed: %v", err)
	}
	// Had a second Close given a slot back again, the cap would now let
	// two calls in.
	var pe *pipeline.Error
	if _, err := c.RoundTrip(req()); !errors.As(err, &pe) || pe.Code != pipeline.CodeConcurrencyLimited {
		t.Fatalf("a call while the third body is open: %v; want concurrency_limited (a slot was given back twice)", err)
	}
	resp3.Body.Close()
}

// A POST with a body that net/http can produce again is retried with the
// whole body when the policy allows it.
func TestARetriedCallSendsItsWholeBodyAgain(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	first := true
	flaky := newBackend(t, "flaky", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		if first {
			first = false
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "stored")
	})
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(flaky)},
		Pipeline: pipeline.Config{Retry: &retry.Policy{Attempts: 2, BackoffBase: time.Millisecond, RetryNonIdempotent: true}},
	}))
	resp, err := c.HTTPClient().Post("http://orders/items", "text/plain", strings.NewReader("item-1"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 200 || string(body) != "stored" || len(bodies) != 2 || bodies[0] != "item-1" || bodies[1] != "item-1" {
		t.Fatalf("got %d %q after attempts with bodies %q; want 200 \"stored\" after two attempts with \"item-1\"", resp.StatusCode, body, bodies)
	}
}

// Routes inside a service: the first whose match selects the call
// protects it; the others get the service's own pipeline.
func TestRoutesInsideAServiceSelectByPathMethodAndHeader(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(ok)},
		Routes: []client.Route{{
			Name:     "writes",
			Match:    client.Match{PathPrefix: "/orders", Methods: []string{"post"}, Headers: map[string]string{"x-env": "canary"}},
			Pipeline: pipeline.Config{RateLimit: []pipeline.RateLimit{{Name: "none", Config: ratelimit.Config{Rate: "1/h", Burst: 1}}}},
		}},
	}))
	call := func(method, path, env string) error {
		req, _ := http.NewRequest(method, "http://orders"+path, strings.NewReader("x"))
		if env != "" {
			req.Header.Set("X-Env", env)
		}
		resp, err := c.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// The route's burst of 1 admits one call; the second is refused.
	if err := call("POST", "/orders/1", "canary"); err != nil {
		t.Fatal(err)
	}
	err := call("POST", "/orders/2", "canary")
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != pipeline.CodeRateLimited || pe.Status != 429 {
		t.Fatalf("second matching call: %v, want 429 %s", err, pipeline.CodeRateLimited)
	}
	for _, miss := range [][3]string{{"GET", "/orders/2", "canary"}, {"POST", "/users", "canary"}, {"POST", "/orders/2", "prod"}} {
		if err := call(miss[0], miss[1], miss[2]); err != nil {
			t.Fatalf("%v does not match the route and should pass: %v", miss, err)
		}
	}
}

// A host that is not a declared service fails with an error naming it, or
// goes to the base RoundTripper when there is one.
func TestUnknownHosts(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	c := newClient(t, client.WithService("orders", client.Service{Upstream: upstream.Config{Targets: targets(ok)}}))
	_, err := c.HTTPClient().Get("http://billing/x")
	var ue *client.UnknownServiceError
	if !errors.As(err, &ue) || ue.Host != "billing" || !strings.Contains(err.Error(), `"billing" is not a declared service (declared: orders)`) {
		t.Fatalf("got %v, want an UnknownServiceError naming billing", err)
	}
	base := newClient(t, client.WithService("orders", client.Service{Upstream: upstream.Config{Targets: targets(ok)}}),
		client.WithBase(http.DefaultTransport))
	if st, body := get(t, base.HTTPClient(), ok.srv.URL+"/direct"); st != 200 || body != "ok" {
		t.Fatalf("through the base transport: %d %q", st, body)
	}
	// Names match without regard to case or port.
	if st, _ := get(t, c.HTTPClient(), "http://ORDERS:8080/x"); st != 200 {
		t.Fatalf("http://ORDERS:8080/x: %d", st)
	}
}

// The client registers the proxy's metric names, with listener="client".
func TestMetricsHaveTheProxysNames(t *testing.T) {
	dead := newBackend(t, "dead", nil)
	dead.srv.Close()
	ok := newBackend(t, "ok", nil)
	reg := prometheus.NewRegistry()
	c := newClient(t, client.WithMetrics(client.NewMetrics(reg)), client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(dead, ok)},
	}))
	for i := 0; i < 4; i++ {
		get(t, c.HTTPClient(), "http://orders/")
	}
	series := gather(t, reg)
	calls := `switchboard_http_requests_total{code="200",listener="client",route="orders",upstream="orders"}`
	retries := `switchboard_upstream_retries_total{reason="connect_failure",upstream="orders"}`
	errs := `switchboard_upstream_errors_total{endpoint="` + dead.addr() + `",kind="connect",upstream="orders"}`
	if series[calls] != 4 {
		t.Errorf("%s = %v, want 4", calls, series[calls])
	}
	// Every call that met the dead endpoint was retried on the live one.
	if series[retries] < 1 || series[retries] != series[errs] {
		t.Errorf("%s = %v and %s = %v; want the same count, at least 1", retries, series[retries], errs, series[errs])
	}
}

// Two clients share one Metrics on one registerer, and their calls add up
// in the same series (a second NewMetrics on that registerer would panic
// on the duplicate names, as MustRegister does).
func TestClientsShareOneMetrics(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	reg := prometheus.NewRegistry()
	m := client.NewMetrics(reg)
	svc := client.WithService("orders", client.Service{Upstream: upstream.Config{Targets: targets(ok)}})
	a := newClient(t, client.WithMetrics(m), svc)
	b := newClient(t, client.WithMetrics(m), svc)
	get(t, a.HTTPClient(), "http://orders/")
	get(t, b.HTTPClient(), "http://orders/")
	get(t, b.HTTPClient(), "http://orders/")
	calls := `switchboard_http_requests_total{code="200",listener="client",route="orders",upstream="orders"}`
	if n := gather(t, reg)[calls]; n != 3 {
		t.Fatalf("%s = %v, want 3 (1 + 2 from two clients)", calls, n)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second NewMetrics on the same registerer did not panic")
		}
	}()
	client.NewMetrics(reg)
}

// gather returns every counter series in reg as name{labels} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+strconv.Quote(lp.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// A call that switches protocols (WebSocket, say) gets a body it can write
// to, as with net/http's own transport.
func TestASwitchedProtocolCanBeWrittenTo(t *testing.T) {
	echo := newBackend(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			w.WriteHeader(400)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	})
	c := newClient(t, client.WithService("chat", client.Service{Upstream: upstream.Config{Targets: targets(echo)}}))
	req, _ := http.NewRequest("GET", "http://chat/ws", nil)
	req.Header.Set("Upgrade", "echo")
	req.Header.Set("Connection", "Upgrade")
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("%d, body %T; want 101 and a body to write to", resp.StatusCode, resp.Body)
	}
	if _, err := io.WriteString(rw, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(rw, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echoed %q, %v; want \"ping\"", buf, err)
	}
}

// A call that gets no answer within hedge_after is sent again to another
// endpoint, and the first answer wins; the caller sees only that one.
func TestAHedgeAnswersForASlowEndpoint(t *testing.T) {
	stuck := make(chan struct{})
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	})
	fast := newBackend(t, "fast", nil)
	defer close(stuck)
	c := newClient(t, client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: targets(slow, fast)},
		Pipeline: pipeline.Config{Retry: &retry.Policy{Attempts: 2, HedgeAfter: "20ms"}},
	}))
	for i := 0; i < 4; i++ {
		if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "fast" {
			t.Fatalf("call %d: %d %q, want the fast endpoint's answer", i, st, body)
		}
	}
	if slow.hits.Load() == 0 {
		t.Fatal("no call went to the slow endpoint first: nothing was hedged")
	}
}
