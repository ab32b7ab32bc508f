package plane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
)

// accessEngineYAML is a listener on engine with the access log on, route
// /dead to an upstream that refuses connections, /maint to the same with a
// static fallback step, and everything else to app, which retries a 503.
func accessEngineYAML(engine, app, dead string) string {
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    engine: ` + engine + `
    access_log: true
    routes:
      - {name: dead, match: {path_prefix: /dead}, upstream: dead}
      - name: maint
        match: {path_prefix: /maint}
        upstream: dead
        fallback:
          on: [retries_exhausted]
          steps: [{type: static, status: 200, headers: {Content-Type: text/plain}, body: "maintenance"}]
      - name: api
        match: {path_prefix: /}
        upstream: app
        retry: {attempts: 2, statuses: [503], backoff_base: 1ms, backoff_max: 2ms}
upstreams:
  app:
    targets: [{address: ` + app + `}]
  dead:
    targets: [{address: ` + dead + `}]
`
}

// TestAccessLogLineIsTheSameOnBothEngines: the same requests on a listener
// with engine: eventloop and on one with engine: goroutine are logged
// with the same fields in the same order and the same values, but for
// the times and the client's port: a 200, a GET retried once after a 503
// (attempts 2), a 502 from an upstream that refuses connections, and a
// fallback step's answer to the same (degraded).
func TestAccessLogLineIsTheSameOnBothEngines(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop engine is Linux only")
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	app := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		mu.Lock()
		first := !seen[id]
		seen[id] = true
		mu.Unlock()
		if r.URL.Path == "/retry" && first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "hello "+r.URL.Path)
	})
	dead := deadAddr(t)
	requests := []struct {
		path     string
		status   int
		attempts float64
	}{
		{"/ok?x=1", 200, 1},
		{"/retry", 200, 2},
		{"/dead", 502, 1},
		{"/maint", 200, 1},
	}
	lines := map[string][]map[string]any{}
	raw := map[string][]string{}
	for _, engine := range []string{"goroutine", "eventloop"} {
		sink := &logSink{lines: make(chan map[string]any, 64)}
		kw := &keyedWriter{sink: sink}
		srv := plane.New(slog.New(slog.NewJSONHandler(kw, nil)), prometheus.NewRegistry())
		if err := srv.Apply(loadYAML(t, accessEngineYAML(engine, app.addr(), dead))); err != nil {
			t.Fatalf("apply: %v", err)
		}
		p := &proxy{t: t, srv: srv}
		c := &http.Client{Transport: &http.Transport{}}
		for i, rq := range requests {
			req, _ := http.NewRequest("GET", p.url("web")+rq.path, nil)
			req.Host = "api.example.com"
			req.Header.Set("User-Agent", "alog-test/1")
			req.Header.Set("X-Request-Id", engine+"-"+strconv.Itoa(i))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: GET %s: %v", engine, rq.path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != rq.status {
				t.Fatalf("%s: GET %s: %d, want %d", engine, rq.path, resp.StatusCode, rq.status)
			}
			m := sink.next(t)
			lines[engine] = append(lines[engine], m)
		}
		c.CloseIdleConnections()
		srv.Shutdown()
		for _, names := range kw.keys {
			raw[engine] = append(raw[engine], strings.Join(names, ","))
		}
	}
	for i, rq := range requests {
		g, e := lines["goroutine"][i], lines["eventloop"][i]
		if e["status"] != float64(rq.status) || e["attempts"] != rq.attempts {
			t.Errorf("event loop: GET %s logged status %v attempts %v, want %d, %v", rq.path, e["status"], e["attempts"], rq.status, rq.attempts)
		}
		if wantDegraded := map[bool]string{true: "static: retries_exhausted"}[rq.path == "/maint"]; e["degraded"] != wantDegraded {
			t.Errorf("event loop: GET %s logged degraded %v, want %q", rq.path, e["degraded"], wantDegraded)
		}
		for _, m := range []map[string]any{g, e} {
			if d, ok := m["duration_seconds"].(float64); !ok || d <= 0 {
				t.Errorf("GET %s: duration_seconds %#v, want a positive number", rq.path, m["duration_seconds"])
			}
			ttfb, ok := m["upstream_ttfb_seconds"].(float64)
			if !ok || (rq.path != "/dead" && rq.path != "/maint") != (ttfb > 0) {
				t.Errorf("GET %s: upstream_ttfb_seconds %#v, want a positive number exactly when the upstream answered", rq.path, m["upstream_ttfb_seconds"])
			}
			host, _, err := net.SplitHostPort(m["remote"].(string))
			if err != nil || host != "127.0.0.1" {
				t.Errorf("GET %s: remote %v, want 127.0.0.1:port", rq.path, m["remote"])
			}
			delete(m, "time")
			delete(m, "duration_seconds")
			delete(m, "upstream_ttfb_seconds")
			delete(m, "remote")
		}
		if g["request_id"] != "goroutine-"+strconv.Itoa(i) || e["request_id"] != "eventloop-"+strconv.Itoa(i) {
			t.Errorf("request ids %v and %v, want the clients'", g["request_id"], e["request_id"])
		}
		delete(g, "request_id")
		delete(e, "request_id")
		if len(g) != len(e) {
			t.Errorf("GET %s: goroutine engine's line %v, event loop's %v", rq.path, g, e)
			continue
		}
		for k, v := range g {
			if e[k] != v {
				t.Errorf("GET %s: %s is %#v on the goroutine engine, %#v on the event loop", rq.path, k, v, e[k])
			}
		}
	}
	if g, e := strings.Join(raw["goroutine"], "\n"), strings.Join(raw["eventloop"], "\n"); g != e || len(raw["eventloop"]) != len(requests) {
		t.Errorf("the fields and their order differ:\n goroutine:\n%s\n eventloop:\n%s", g, e)
	}
}

// keyedWriter is a log writer that also keeps the field names of each
// access line, in their order.
type keyedWriter struct {
	sink *logSink
	mu   sync.Mutex
	keys [][]string
}

func (k *keyedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"msg":"access"`)) {
		var names []string
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.Token() // {
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			names = append(names, tok.(string))
			var v any
			dec.Decode(&v)
		}
		k.mu.Lock()
		k.keys = append(k.keys, names)
		k.mu.Unlock()
	}
	return k.sink.Write(p)
}

// gatedWriter holds every access line written through it until gate is
// closed: a log reader that stopped reading.
type gatedWriter struct {
	gate <-chan struct{}
	sink *logSink
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"msg":"access"`)) {
		<-g.gate
	}
	return g.sink.Write(p)
}

// TestEventLoopServesAccessLoggedRequestsWhileTheLogStalls: on a listener
// with engine: eventloop and the access log on, requests are answered
// while the log's writer is stuck (the goroutine engine, which writes the
// line before it finishes the response, would hang on the first: so they
// were served on the loop, not handed off), and the lines still queued
// when the plane shuts down are all written, in order, before Shutdown
// returns.
func TestEventLoopServesAccessLoggedRequestsWhileTheLogStalls(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop engine is Linux only")
	}
	app := rawBackend(t)
	gate := make(chan struct{})
	sink := &logSink{lines: make(chan map[string]any, 64)}
	srv := plane.New(slog.New(slog.NewJSONHandler(&gatedWriter{gate: gate, sink: sink}, nil)), prometheus.NewRegistry())
	if err := srv.Apply(loadYAML(t, accessEngineYAML("eventloop", app, deadAddr(t)))); err != nil {
		t.Fatalf("apply: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(srv.Shutdown) }
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		stop()
	})
	addr := srv.Addr("web")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	const n = 5
	for i := range n {
		io.WriteString(c, "GET /r"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\nX-Request-Id: id-"+strconv.Itoa(i)+"\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d with the log writer stalled: %v (not served on the loop?)", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c.Close()
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	// Once the listener refuses connections, the shutdown has begun: only
	// then may the writer go on.
	deadline := time.Now().Add(10 * time.Second)
	for {
		dc, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		dc.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts 10s after Shutdown began")
		}
	}
	close(gate)
	<-stopped
	for i := range n {
		select {
		case m := <-sink.lines:
			if m["request_id"] != "id-"+strconv.Itoa(i) || m["path"] != "/r"+strconv.Itoa(i) || m["status"] != 200.0 {
				t.Fatalf("line %d after Shutdown: %v, want request id-%d's", i, m, i)
			}
		default:
			t.Fatalf("Shutdown returned with %d of the %d queued access lines written", i, n)
		}
	}
}

// TestAccessLoggedRequestAllocations reports the allocations of a
// keep-alive GET on a listener with the access log on, on each engine. The
// log's handler takes the lines and drops them: what is counted is the
// engines' own cost of a line (the writer's too, on the event loop), not
// a log format's (slog's JSON handler adds two; under -race its pooled
// buffers are dropped at random, and it adds more).
func TestAccessLoggedRequestAllocations(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop engine is Linux only")
	}
	if testing.Short() {
		t.Skip("counts allocations over 2000 requests")
	}
	be := rawBackend(t)
	for _, engine := range []string{"goroutine", "eventloop"} {
		t.Run(engine, func(t *testing.T) {
			h := &takingHandler{}
			srv := plane.New(slog.New(h), prometheus.NewRegistry())
			if err := srv.Apply(loadYAML(t, accessEngineYAML(engine, be, deadAddr(t)))); err != nil {
				t.Fatalf("apply: %v", err)
			}
			t.Cleanup(srv.Shutdown)
			n := allocsPerGet(t, srv.Addr("web"), "/bench")
			t.Logf("%.2f allocations per proxied request with the access log on (%s)", n, engine)
			max := maxAccessLoggedRequestAllocs[engine]
			if raceEnabled() {
				max++ // measured: one more with the race detector, on either engine
			}
			if n > float64(max) {
				t.Errorf("a proxied GET with the access log on allocates %.2f times, want at most %d", n, max)
			}
			srv.Shutdown()
			if h.access.Load() < 2200 {
				t.Errorf("%d access lines written for 2200 requests", h.access.Load())
			}
		})
	}
}

// takingHandler is a slog.Handler that counts the access lines it takes
// and writes nothing.
type takingHandler struct{ access atomic.Int64 }

func (h *takingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *takingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *takingHandler) WithGroup(string) slog.Handler            { return h }
func (h *takingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "access" {
		h.access.Add(1)
	}
	return nil
}

// maxAccessLoggedRequestAllocs bounds TestAccessLoggedRequestAllocations
// per engine: a request's own (7 on the goroutine engine, at most 1 on
// the event loop: TestProxiedRequestAllocations) and the line's one, on
// either engine (the attributes past slog.Record's five inline ones); on
// the event loop one more, the copy of the strings the line borrows from
// the request (accessLine.own).
var maxAccessLoggedRequestAllocs = map[string]int{"goroutine": 8, "eventloop": 3}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
