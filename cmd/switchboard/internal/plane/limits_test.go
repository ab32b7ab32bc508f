package plane_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"testing"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func limitYAML(route string, target string) string {
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: api
        match: {path_prefix: /}
        upstream: app
` + route + `
upstreams:
  app:
    targets: [{address: ` + target + `}]
`
}

func doGet(t *testing.T, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestRateLimitRejectsWith429AndHeaders(t *testing.T) {
	b := newBackend(t, "b", nil)
	p := startProxy(t, limitYAML(`        rate_limit:
          - {name: per_user, rate: 1/m, burst: 3, key: "header:X-User"}`, b.addr()))
	user := map[string]string{"X-User": "alice"}
	for i := 0; i < 3; i++ {
		resp, _ := doGet(t, p.url("web")+"/", user)
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Remaining") != strconv.Itoa(2-i) || resp.Header.Get("RateLimit-Limit") != "3" {
			t.Fatalf("request %d: %d, RateLimit-Limit %q, -Remaining %q", i, resp.StatusCode, resp.Header.Get("RateLimit-Limit"), resp.Header.Get("RateLimit-Remaining"))
		}
	}
	resp, body := doGet(t, p.url("web")+"/", user)
	if resp.StatusCode != 429 {
		t.Fatalf("4th request: %d, want 429", resp.StatusCode)
	}
	var e struct{ Error, Code string }
	json.Unmarshal([]byte(body), &e)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if e.Code != "rate_limited" || resp.Header.Get("X-Switchboard-Error") != "rate_limited" || ra < 1 || ra > 60 ||
		resp.Header.Get("RateLimit-Remaining") != "0" || resp.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("429: body %s, Retry-After %q, headers %v", body, resp.Header.Get("Retry-After"), resp.Header)
	}
	// Another key has a bucket of its own.
	if resp, _ := doGet(t, p.url("web")+"/", map[string]string{"X-User": "bob"}); resp.StatusCode != 200 {
		t.Fatalf("another user: %d", resp.StatusCode)
	}
	for dec, want := range map[string]float64{"allowed": 4, "rejected": 1} {
		if got := p.metric("switchboard_ratelimit_decisions_total", map[string]string{"route": "api", "limiter": "per_user", "decision": dec}); got != want {
			t.Errorf("decisions{%s} = %v, want %v", dec, got, want)
		}
	}
}

func TestRateLimitStateSurvivesReload(t *testing.T) {
	b := newBackend(t, "b", nil)
	yaml := limitYAML(`        rate_limit: [{rate: 1/m, burst: 1}]`, b.addr())
	p := startProxy(t, yaml)
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	cfg, err := config.Parse("same.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 429 {
		t.Fatalf("after a reload with the same limit the bucket was refilled: %d", resp.StatusCode)
	}
}

func TestLeakyBucketDelaysInsteadOfRejecting(t *testing.T) {
	b := newBackend(t, "b", nil)
	// 250ms slots: a request answered within them (even under a loaded
	// -race run) leaves the next one early for its slot.
	p := startProxy(t, limitYAML(`        rate_limit: [{name: smooth, algorithm: leaky_bucket, rate: 4/s, queue: 10}]`, b.addr()))
	for i := 0; i < 3; i++ {
		if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want every request delayed, not refused", i, resp.StatusCode)
		}
	}
	// The first goes at once; each next one arrives before its slot.
	allowed := p.metric("switchboard_ratelimit_decisions_total", map[string]string{"limiter": "smooth", "decision": "allowed"})
	delayed := p.metric("switchboard_ratelimit_decisions_total", map[string]string{"limiter": "smooth", "decision": "delayed"})
	if allowed != 1 || delayed != 2 {
		t.Fatalf("allowed %v, delayed %v; want 1 and 2", allowed, delayed)
	}
}

func TestConcurrencyLimitSheds503(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	b := busyBackend(t, "b", entered, release)
	p := startProxy(t, limitYAML(`        concurrency: {max_in_flight: 1}`, b.addr()))
	done := getAsync(p.url("web") + "/hold")
	<-entered
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Switchboard-Error") != "concurrency_limited" {
		t.Fatalf("second request while one is in flight: %d %s", resp.StatusCode, body)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
		t.Fatalf("after the slot freed: %d", resp.StatusCode)
	}
}

// TestGlobalLimitSharedThroughRedis runs three data planes, each with its
// own Redis client as three switchboard processes would have, against one
// real redis-server, then kills Redis.
func TestGlobalLimitSharedThroughRedis(t *testing.T) {
	rs := testutil.StartRedis(t)
	b := newBackend(t, "b", nil)
	route := fmt.Sprintf(`        rate_limit:
          - name: global
            rate: 1/h
            burst: 20
            global: {redis: %s, timeout: 50ms, on_failure: fail_closed}`, rs.Addr)
	var proxies []*proxy
	for i := 0; i < 3; i++ {
		proxies = append(proxies, startProxy(t, limitYAML(route, b.addr())))
	}
	admitted := 0
	for i := 0; i < 60; i++ {
		resp, _ := doGet(t, proxies[i%3].url("web")+"/", nil)
		switch resp.StatusCode {
		case 200:
			admitted++
		case 429:
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	// 20 is the burst; at 1/h nothing refills within the test.
	if admitted != 20 {
		t.Fatalf("three instances admitted %d in total, want the shared burst of 20", admitted)
	}
	rs.Signal(t, syscall.SIGKILL)
	for i := 0; i < 3; i++ {
		resp, _ := doGet(t, proxies[i].url("web")+"/", nil)
		if resp.StatusCode != 429 {
			t.Fatalf("fail_closed with Redis gone: %d, want 429", resp.StatusCode)
		}
	}
	if got := proxies[0].metric("switchboard_ratelimit_redis_errors_total", map[string]string{"route": "api", "limiter": "global"}); got < 1 {
		t.Fatalf("redis errors not counted: %v", got)
	}
}

func TestUpstreamConcurrencyLimitSpansRoutes(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	b := busyBackend(t, "b", entered, release)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - {name: one, match: {path_prefix: /hold}, upstream: app}
      - {name: two, match: {path_prefix: /}, upstream: app}
upstreams:
  app:
    concurrency: {max_in_flight: 1}
    targets: [{address: `+b.addr()+`}]
`)
	done := getAsync(p.url("web") + "/hold")
	<-entered
	// Route "two" shares the upstream's one slot with route "one".
	if resp, body := doGet(t, p.url("web")+"/other", nil); resp.StatusCode != 503 || resp.Header.Get("X-Switchboard-Error") != "concurrency_limited" {
		t.Fatalf("other route while the upstream's slot is taken: %d %s", resp.StatusCode, body)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	if resp, _ := doGet(t, p.url("web")+"/other", nil); resp.StatusCode != 200 {
		t.Fatalf("after the slot freed: %d", resp.StatusCode)
	}
	if got := p.metric("switchboard_concurrency_rejections_total", map[string]string{"route": "two", "scope": "upstream"}); got != 1 {
		t.Fatalf("rejections{two,upstream} = %v", got)
	}
}

// getAsync sends a GET in the background; the channel gets its status (0
// on a transport error).
func getAsync(url string) <-chan int {
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}
