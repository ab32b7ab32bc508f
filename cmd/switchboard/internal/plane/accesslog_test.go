package plane_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// logSink is a JSON log that tests read access lines from.
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan map[string]any
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for {
		line, err := s.buf.ReadBytes('\n')
		if err != nil {
			s.buf.Write(line) // the rest comes with the next write
			return len(p), nil
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == "access" {
			select {
			case s.lines <- m:
			default: // a test that does not read them must not stall the proxy
			}
		}
	}
}

// next waits for the next access line.
func (s *logSink) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-s.lines:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no access log line within 5s")
		return nil
	}
}

// startLoggedProxy is startProxy with the process log, JSON, going to the
// returned sink.
func startLoggedProxy(t *testing.T, yaml string) (*proxy, *logSink) {
	t.Helper()
	p, sink, _ := startStoppableProxy(t, yaml)
	return p, sink
}

// startStoppableProxy is startLoggedProxy that also returns a function
// that shuts the plane down (flushing its spans); cleanup calls it too.
func startStoppableProxy(t *testing.T, yaml string) (*proxy, *logSink, func()) {
	t.Helper()
	sink := &logSink{lines: make(chan map[string]any, 64)}
	reg := prometheus.NewRegistry()
	srv := plane.New(slog.New(slog.NewJSONHandler(sink, nil)), reg)
	if err := srv.Apply(loadYAML(t, yaml)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(srv.Shutdown) }
	t.Cleanup(stop)
	return &proxy{t: t, srv: srv, reg: reg}, sink, stop
}

// loadYAML loads yaml as `switchboard serve` would.
func loadYAML(t testing.TB, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config does not load:\n%v\n---\n%s", err, yaml)
	}
	return cfg
}

// loggedYAML is limitYAML with the access log on.
func loggedYAML(route, target string) string {
	return strings.Replace(limitYAML(route, target), "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    access_log: true\n", 1)
}

// TestAccessLogRecordsEveryField: a POST that is retried once (the first
// answer is a 503) is logged with every field the access log promises,
// each with the request's value: duration_seconds (a float, and no
// integer duration), the body bytes in and out, query, user agent, route,
// upstream, endpoint, attempts, the upstream's time to first byte, status,
// the client's request id, and no degraded step or trace id.
func TestAccessLogRecordsEveryField(t *testing.T) {
	var hits atomic.Int64
	const answer = "created order 42\n"
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if string(body) != `{"item":1}` {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(20 * time.Millisecond) // a measurable time to first byte, not a wait for an event
		w.Write([]byte(answer))
	})
	p, sink := startLoggedProxy(t, loggedYAML(`        retry: {attempts: 2, statuses: [503], retry_non_idempotent: true, backoff_base: 1ms, backoff_max: 2ms}
        buffer_requests: {}`, b.addr()))
	req, _ := http.NewRequest("POST", p.url("web")+"/orders?item=1&express=yes", strings.NewReader(`{"item":1}`))
	req.Header.Set("User-Agent", "h19-test/1.0")
	req.Header.Set("X-Request-Id", "client-id-7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != answer {
		t.Fatalf("answer %d %q, want 200 %q", resp.StatusCode, got, answer)
	}
	if id := resp.Header.Get("X-Request-Id"); id != "client-id-7" {
		t.Fatalf("X-Request-Id %q, want the client's client-id-7", id)
	}
	m := sink.next(t)
	want := map[string]any{
		"method": "POST", "path": "/orders", "query": "item=1&express=yes", "user_agent": "h19-test/1.0",
		"status": 200.0, "route": "api", "upstream": "app", "endpoint": b.addr(), "attempts": 2.0,
		"bytes_in": float64(len(`{"item":1}`)), "bytes_out": float64(len(answer)),
		"request_id": "client-id-7", "degraded": "",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("access log %s = %#v, want %#v", k, m[k], v)
		}
	}
	dur, ok1 := m["duration_seconds"].(float64)
	ttfb, ok2 := m["upstream_ttfb_seconds"].(float64)
	if !ok1 || !ok2 {
		t.Fatalf("duration_seconds %#v and upstream_ttfb_seconds %#v must be numbers", m["duration_seconds"], m["upstream_ttfb_seconds"])
	}
	if ttfb < 0.020 || dur < ttfb {
		t.Errorf("upstream_ttfb_seconds %v, duration_seconds %v: want ttfb >= 0.020 (the endpoint's delay) and duration >= ttfb", ttfb, dur)
	}
	for _, k := range []string{"duration", "trace_id"} {
		if _, ok := m[k]; ok {
			t.Errorf("access log has %s = %#v; want none", k, m[k])
		}
	}
}

// TestAccessLogCountsStreamedBodies: a chunked request body of unknown
// length is counted as it streams upstream, and a streamed (chunked)
// response as it streams back.
func TestAccessLogCountsStreamedBodies(t *testing.T) {
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		for i := int64(0); i < n; i++ {
			w.Write([]byte("ab"))
			w.(http.Flusher).Flush()
		}
	})
	p, sink := startLoggedProxy(t, loggedYAML("", b.addr()))
	req, _ := http.NewRequest("PUT", p.url("web")+"/stream", io.MultiReader(strings.NewReader("12345"), strings.NewReader("678")))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(got) != 16 {
		t.Fatalf("got %d bytes, want 16", len(got))
	}
	m := sink.next(t)
	if m["bytes_in"] != 8.0 || m["bytes_out"] != 16.0 || m["attempts"] != 1.0 {
		t.Fatalf("bytes_in %v bytes_out %v attempts %v, want 8, 16, 1", m["bytes_in"], m["bytes_out"], m["attempts"])
	}
}

// TestAccessLogNamesTheDegradedStep: an answer from a fallback step is
// logged with the step and its reason, and no endpoint or attempt.
func TestAccessLogNamesTheDegradedStep(t *testing.T) {
	b := newBackend(t, "b", nil)
	p, sink := startLoggedProxy(t, loggedYAML(`        fallback:
          on: [no_healthy_endpoint]
          steps: [{type: static, status: 200, headers: {Content-Type: text/plain}, body: "maintenance"}]`, b.addr()))
	for _, ep := range p.upstream("app").Pool().Snapshot().All {
		ep.SetStatus(endpoint.Unhealthy, "test", time.Now())
	}
	p.upstream("app").Pool().Refresh()
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 200 || body != "maintenance" {
		t.Fatalf("answer %d %q, want the static step's", resp.StatusCode, body)
	}
	m := sink.next(t)
	if m["degraded"] != "static: no_healthy_endpoint" || m["attempts"] != 0.0 || m["endpoint"] != "" || m["bytes_out"] != float64(len("maintenance")) {
		t.Fatalf("degraded %v attempts %v endpoint %v bytes_out %v; want static: no_healthy_endpoint, 0, \"\", 11",
			m["degraded"], m["attempts"], m["endpoint"], m["bytes_out"])
	}
}

// TestRequestIDOnEveryAnswer: every answer the proxy makes itself carries
// X-Request-Id — the client's when it sent a valid one, a made one
// otherwise — and the access log line has the same id: 404 no_route,
// 429 from a rate limit, 503 no_healthy_endpoint, 502 connect failure, and
// 403 from an access list, a redirect, and a relayed answer.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	down := newBackend(t, "down", nil)
	p, sink := startLoggedProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    access_log: true
    routes:
      - {name: limited, match: {path_prefix: /limited}, upstream: ok, rate_limit: [{rate: 1/m, burst: 1}]}
      - {name: down, match: {path_prefix: /down}, upstream: down}
      - {name: dead, match: {path_prefix: /dead}, upstream: dead}
      - {name: denied, match: {path_prefix: /denied}, upstream: ok, access: {allow: [192.0.2.0/24]}}
      - {name: moved, match: {path_prefix: /moved}, redirect: {to: "https://example.com{path}"}}
      - {name: ok, match: {path_prefix: /ok}, upstream: ok}
upstreams:
  ok:
    targets: [{address: `+ok.addr()+`}]
  down:
    targets: [{address: `+down.addr()+`}]
  dead:
    targets: [{address: `+deadAddr(t)+`}]
`)
	for _, ep := range p.upstream("down").Pool().Snapshot().All {
		ep.SetStatus(endpoint.Unhealthy, "test", time.Now())
	}
	p.upstream("down").Pool().Refresh()
	if resp, _ := doGet(t, p.url("web")+"/limited", nil); resp.StatusCode != 200 {
		t.Fatalf("first request under the limit: %d", resp.StatusCode)
	}
	sink.next(t)

	cases := []struct {
		name, path string
		status     int
		code       string
	}{
		{"no route", "/nothing", 404, "no_route"},
		{"rate limited", "/limited", 429, "rate_limited"},
		{"no endpoint", "/down", 503, "no_healthy_endpoint"},
		{"connect failure", "/dead", 502, "upstream_connect_failed"},
		{"forbidden", "/denied", 403, "forbidden"},
		{"redirect", "/moved", 302, ""},
		{"relayed", "/ok", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The client's own id is kept.
			resp := getNoFollow(t, p.url("web")+tc.path, "mine-"+tc.code)
			if resp.StatusCode != tc.status || resp.Header.Get("X-Switchboard-Error") != tc.code {
				t.Fatalf("%s: %d %q, want %d %q", tc.path, resp.StatusCode, resp.Header.Get("X-Switchboard-Error"), tc.status, tc.code)
			}
			if id := resp.Header.Get("X-Request-Id"); id != "mine-"+tc.code {
				t.Fatalf("X-Request-Id %q, want the client's mine-%s", id, tc.code)
			}
			if m := sink.next(t); m["request_id"] != "mine-"+tc.code || m["status"] != float64(tc.status) {
				t.Fatalf("access log request_id %v status %v, want mine-%s %d", m["request_id"], m["status"], tc.code, tc.status)
			}
			// Without one (or with an invalid one) the proxy makes one.
			resp = getNoFollow(t, p.url("web")+tc.path, "has a space")
			id := resp.Header.Get("X-Request-Id")
			if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
				t.Fatalf("made X-Request-Id %q, want 32 hex digits", id)
			}
			if m := sink.next(t); m["request_id"] != id {
				t.Fatalf("access log request_id %v, want the answer's %s", m["request_id"], id)
			}
		})
	}
}

// getNoFollow GETs url with X-Request-Id id, not following a redirect.
func getNoFollow(t *testing.T, url, id string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Request-Id", id)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
