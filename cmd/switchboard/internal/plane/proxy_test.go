package plane_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"golang.org/x/net/websocket"
)

func TestRoundRobinAcrossTargets(t *testing.T) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	p := startProxy(t, upstreamYAML("", a.addr(), b.addr(), c.addr()))
	var seq []string
	for i := 0; i < 30; i++ {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, body %q", i, resp.StatusCode, body)
		}
		seq = append(seq, body)
	}
	counts := map[string]int{}
	for i, s := range seq {
		counts[s]++
		if i >= 3 && s != seq[i-3] {
			t.Fatalf("not round robin: request %d went to %s, request %d to %s (sequence %v)", i, s, i-3, seq[i-3], seq)
		}
	}
	if counts["a"] != 10 || counts["b"] != 10 || counts["c"] != 10 {
		t.Fatalf("want 10 requests per backend, got %v", counts)
	}
	if got := p.metric("switchboard_http_requests_total", map[string]string{"route": "web/0", "upstream": "app", "code": "200"}); got != 30 {
		t.Fatalf("switchboard_http_requests_total{code=200} = %v, want 30", got)
	}
}

func TestKeepAlivePoolReusesConnections(t *testing.T) {
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	p := startProxy(t, upstreamYAML("", a.addr(), b.addr()))
	const workers, perWorker = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				resp, err := http.Get(p.url("web") + "/")
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// At most one upstream connection per concurrent request per backend:
	// 400 requests must not mean 400 connections.
	if n := a.conns.Load() + b.conns.Load(); n > 2*workers {
		t.Fatalf("%d upstream connections for %d requests with %d workers; want at most %d", n, workers*perWorker, workers, 2*workers)
	}
}

func decodeError(t *testing.T, resp *http.Response, body string) (string, string) {
	t.Helper()
	var e struct{ Error, Code string }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body is not JSON: %q: %v", body, err)
	}
	if h := resp.Header.Get("X-Switchboard-Error"); h != e.Code {
		t.Fatalf("X-Switchboard-Error %q != body code %q", h, e.Code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	return e.Code, e.Error
}

func TestErrorResponses(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	ok := newBackend(t, "ok", nil)
	dead := deadAddr(t)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    max_body_bytes: 10
    routes:
      - match: {path_prefix: /dead}
        upstream: dead
      - match: {path_prefix: /slow}
        upstream: slow
      - match: {path_prefix: /down}
        upstream: down
      - match: {path_prefix: /ok, host: api.example.com}
        upstream: ok
upstreams:
  dead:
    targets: [{address: `+dead+`}]
  slow:
    timeouts: {response_header: 200ms}
    targets: [{address: `+slow.addr()+`}]
  down:
    targets: [{address: `+ok.addr()+`}]
  ok:
    targets: [{address: `+ok.addr()+`}]
`)
	// Put every endpoint of "down" out of service.
	for _, u := range p.srv.Upstreams() {
		if u.Name() == "down" {
			for _, ep := range u.Pool().Snapshot().All {
				ep.SetStatus(endpoint.Unhealthy, "test", time.Now())
			}
			u.Pool().Refresh()
		}
	}
	cases := []struct {
		name, method, path, host, body string
		status                         int
		code                           string
	}{
		{"no route", "GET", "/nothing", "", "", 404, "no_route"},
		{"host mismatch", "GET", "/ok", "other.example.com", "", 404, "no_route"},
		{"no endpoint", "GET", "/down", "", "", 503, "no_healthy_endpoint"},
		{"connect failure", "GET", "/dead", "", "", 502, "upstream_connect_failed"},
		{"timeout", "GET", "/slow", "", "", 504, "upstream_timeout"},
		{"body too large", "POST", "/ok", "api.example.com", "0123456789abc", 413, "body_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, p.url("web")+tc.path, strings.NewReader(tc.body))
			if tc.body == "" {
				req.Body = nil
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tc.status, b)
			}
			if code, _ := decodeError(t, resp, string(b)); code != tc.code {
				t.Fatalf("code %q, want %q", code, tc.code)
			}
		})
	}
	// The matching host reaches the backend.
	req, _ := http.NewRequest("GET", p.url("web")+"/ok", nil)
	req.Host = "API.example.com:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("host match is case-insensitive and ignores the port: got %d", resp.StatusCode)
	}
}

func TestConnectFailureRetriedOnAnotherEndpoint(t *testing.T) {
	a := newBackend(t, "a", nil)
	dead := deadAddr(t)
	// Passive ejection off: this is the retry rule alone (with it, the
	// dead endpoint is out after three failures; see
	// TestADeadTargetIsEjectedWithoutHealthSettings).
	p := startProxy(t, upstreamYAML("    health: {passive: {enabled: false}}\n", dead, a.addr()))
	for i := 0; i < 10; i++ {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/")
		if resp.StatusCode != 200 || body != "a" {
			t.Fatalf("request %d: %d %q; a connect failure must be retried on the live endpoint", i, resp.StatusCode, body)
		}
	}
	// Round robin over [dead, a]: each request's first pick is the dead
	// endpoint, because the retry takes the live endpoint's turn. Every
	// request is retried exactly once (passive health, not the retry, is
	// what takes a dead endpoint out of rotation).
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "connect_failure"}); got != 10 {
		t.Fatalf("retries = %v, want 10", got)
	}
	if got := p.metric("switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": dead, "kind": "connect"}); got != 10 {
		t.Fatalf("connect errors = %v, want 10", got)
	}
}

// Without a retry policy, an idempotent request without a body whose
// exchange broke before any response byte goes once more to another
// endpoint (nginx's default proxy_next_upstream does the same); a POST is
// not sent twice.
func TestBrokenExchangeRetriedWithoutPolicyOnlyWhenReplayable(t *testing.T) {
	a := newBackend(t, "a", nil)
	broken := serveRaw(t, func(c net.Conn) {
		// Read the request head, then hang up without a byte of answer.
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				return
			}
		}
	})
	p := startProxy(t, upstreamYAML("    health: {passive: {enabled: false}}\n", broken, a.addr()))
	for i := range 6 {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/")
		if resp.StatusCode != 200 || body != "a" {
			t.Fatalf("GET %d: %d %q; a broken exchange of a GET must be retried on the other endpoint", i, resp.StatusCode, body)
		}
	}
	// Round robin over [broken, a]: each GET's first pick is broken.
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "reset"}); got != 6 {
		t.Fatalf("reset retries = %v, want 6", got)
	}
	fails := 0
	for range 2 { // one of the two POSTs is picked for broken first
		resp, err := http.Post(p.url("web")+"/", "text/plain", strings.NewReader("once"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadGateway && resp.Header.Get("X-Switchboard-Error") == "upstream_error" {
			fails++
		}
	}
	if fails != 1 {
		t.Fatalf("POSTs answered 502 upstream_error: %d, want 1 (a POST is not re-sent without a policy)", fails)
	}
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "reset"}); got != 6 {
		t.Fatalf("reset retries after the POSTs = %v, want still 6", got)
	}
}

func TestForwardingHeaders(t *testing.T) {
	var got http.Header
	var gotHost string
	b := newBackend(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		gotHost = r.Host
		w.Header().Set("Connection", "X-Internal")
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Switchboard-Load", "cpu=0.5, mem=0.5")
		w.Header().Set("X-Public", "yes")
		w.Write([]byte("ok"))
	})
	p := startProxy(t, upstreamYAML("", b.addr()))
	req, _ := http.NewRequest("GET", p.url("web")+"/h?q=1", nil)
	req.Host = "shop.example.com"
	req.Header.Set("Connection", "X-Drop-Me, keep-alive")
	req.Header.Set("X-Drop-Me", "1")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
	req.Header.Set("Te", "gzip")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Keep", "kept")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, h := range []string{"Connection", "X-Drop-Me", "Keep-Alive", "Proxy-Authorization", "Te"} {
		if v, ok := got[h]; ok {
			t.Errorf("hop-by-hop header %s reached the backend: %q", h, v)
		}
	}
	if v := got.Get("X-Forwarded-For"); v != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client appended", v)
	}
	if v := got.Get("X-Forwarded-Proto"); v != "http" {
		t.Errorf("X-Forwarded-Proto = %q, want this hop's scheme", v)
	}
	if v := got.Get("X-Forwarded-Host"); v != "shop.example.com" {
		t.Errorf("X-Forwarded-Host = %q", v)
	}
	if gotHost != "shop.example.com" {
		t.Errorf("Host = %q, want the client's", gotHost)
	}
	if v := got.Get("X-Keep"); v != "kept" {
		t.Errorf("end-to-end header lost: X-Keep = %q", v)
	}
	id := got.Get("X-Request-Id")
	if len(id) != 32 {
		t.Errorf("generated X-Request-Id = %q, want 32 hex digits", id)
	}
	if v := resp.Header.Get("X-Request-Id"); v != id {
		t.Errorf("response X-Request-Id = %q, want %q", v, id)
	}
	for _, h := range []string{"X-Internal", "Keep-Alive", "X-Switchboard-Load"} {
		if v, ok := resp.Header[h]; ok {
			t.Errorf("response header %s reached the client: %q", h, v)
		}
	}
	if resp.Header.Get("X-Public") != "yes" {
		t.Errorf("end-to-end response header lost")
	}

	// A client's X-Request-Id is kept.
	req, _ = http.NewRequest("GET", p.url("web")+"/h", nil)
	req.Header.Set("X-Request-Id", "abc-123")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := got.Get("X-Request-Id"); v != "abc-123" {
		t.Errorf("client X-Request-Id replaced: %q", v)
	}
}

func TestFlushedChunkArrivesBeforeUpstreamFinishes(t *testing.T) {
	finish := make(chan struct{})
	b := newBackend(t, "sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-finish:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: second\n\n")
	})
	p := startProxy(t, upstreamYAML("", b.addr()))
	resp, err := http.Get(p.url("web") + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	// Only now may the upstream finish: the first event came through while
	// the upstream was still holding the response open.
	close(finish)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest = %q", rest)
	}
}

func TestRequestBodyIsStreamedNotBuffered(t *testing.T) {
	firstChunk := make(chan []byte, 1)
	b := newBackend(t, "sink", func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("backend: %v", err)
			return
		}
		firstChunk <- buf
		rest, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s+%d", buf, len(rest))
	})
	p := startProxy(t, upstreamYAML("", b.addr()))
	pr, pw := io.Pipe()
	type res struct {
		body string
		err  error
	}
	done := make(chan res, 1)
	go func() {
		resp, err := http.Post(p.url("web")+"/upload", "application/octet-stream", pr)
		if err != nil {
			done <- res{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- res{string(body), err}
	}()
	pw.Write([]byte("first"))
	// The backend sees the first bytes while the client is still sending:
	// the proxy does not wait for the whole body.
	select {
	case got := <-firstChunk:
		if string(got) != "first" {
			t.Fatalf("backend got %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first chunk did not reach the backend before the body was complete")
	}
	pw.Write(bytes.Repeat([]byte("x"), 1<<20))
	pw.Close()
	r := <-done
	if r.err != nil || r.body != "first+1048576" {
		t.Fatalf("got %q, %v", r.body, r.err)
	}
}

func TestLargeBodiesBothWays(t *testing.T) {
	const size = 8 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	b := newBackend(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		// net/http's HTTP/1 server cannot read a body after it has begun
		// the response, so the backend reads first.
		in, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(in, payload) {
			http.Error(w, "bad upload", 400)
			return
		}
		w.Write(in)
	})
	p := startProxy(t, upstreamYAML("", b.addr()))
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader(payload)
		if chunked {
			body = io.MultiReader(body) // hides the length: sent chunked
		}
		resp, err := http.Post(p.url("web")+"/echo", "application/octet-stream", body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, payload) {
			t.Fatalf("chunked=%v: status %d, %d bytes back (err %v), want the %d sent", chunked, resp.StatusCode, len(got), err, len(payload))
		}
	}
}

func TestWebSocketEcho(t *testing.T) {
	b := newBackend(t, "ws", websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }).ServeHTTP)
	p := startProxy(t, upstreamYAML("", b.addr()))
	url := strings.Replace(p.url("web"), "http://", "ws://", 1) + "/ws"
	ws, err := websocket.Dial(url, "", "http://localhost/")
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	defer ws.Close()
	for _, msg := range []string{"hello", "switchboard", strings.Repeat("x", 100000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		// The echo server re-frames what it reads, so read the stream, not
		// one frame.
		echo := make([]byte, len(msg))
		if _, err := io.ReadFull(ws, echo); err != nil {
			t.Fatal(err)
		}
		if string(echo) != msg {
			t.Fatalf("echo of %d bytes differs", len(msg))
		}
	}
}

func TestH2CUpstreamPost(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	b := newBackendWith(t, "h2c", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Proto, r.Method, body)
	}, func(s *http.Server) { s.Protocols = &protos })
	p := startProxy(t, upstreamYAML("    protocol: h2c\n", b.addr()))
	resp, err := http.Post(p.url("web")+"/grpc.Service/Method", "application/octet-stream", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "HTTP/2.0 POST payload" {
		t.Fatalf("got %d %q, want the upstream to see HTTP/2.0 POST payload", resp.StatusCode, body)
	}
}

func TestHTTP2FromClientsOverTLS(t *testing.T) {
	b := newBackend(t, "a", nil)
	cert, key := writeSelfSigned(t)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: tls
    listen: 127.0.0.1:0
    tls: {cert_file: `+cert+`, key_file: `+key+`}
    routes:
      - match: {path_prefix: /}
        upstream: app
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	resp, body := get(t, c, strings.Replace(p.url("tls"), "http://", "https://", 1)+"/")
	if resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || body != "a" {
		t.Fatalf("got %s %d %q, want HTTP/2.0 200 \"a\"", resp.Proto, resp.StatusCode, body)
	}
}

// rawUpstream answers every request on a connection with answer(method).
func rawUpstream(t *testing.T, answer func(method string) string) string {
	t.Helper()
	return serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, answer(req.Method)); err != nil {
				return
			}
		}
	})
}

// serveRaw accepts loopback connections until the test ends and hands each
// to serve on a goroutine of its own; it returns the address.
func serveRaw(t testing.TB, serve func(net.Conn)) string { return testutil.ServeTCP(t, serve) }

func TestBytesAfterAResponseNeverReachAnotherRequest(t *testing.T) {
	poison := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Poison: 1\r\n\r\nPOISON"
	up := rawUpstream(t, func(method string) string {
		if method == "HEAD" {
			// A HEAD answer with a body: the body must not be taken for
			// the next exchange's response.
			return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(poison), poison)
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	})
	p := startProxy(t, upstreamYAML("", up))
	req, _ := http.NewRequest("HEAD", p.url("web")+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := 0; i < 3; i++ {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/x")
		if body != "ok" || resp.Header.Get("X-Poison") != "" {
			t.Fatalf("request %d got %q (X-Poison %q): another exchange's bytes", i, body, resp.Header.Get("X-Poison"))
		}
	}
}

func TestMalformedUpstreamStatusIs502AndLeaksNothing(t *testing.T) {
	up := rawUpstream(t, func(string) string { return "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n" })
	p := startProxy(t, upstreamYAML("    concurrency: {max_in_flight: 1}\n", up))
	for i := 0; i < 3; i++ {
		resp, body := get(t, http.DefaultClient, p.url("web")+"/")
		if resp.StatusCode != 502 {
			t.Fatalf("request %d: %d %s; want 502 every time (a leaked slot would give 503)", i, resp.StatusCode, body)
		}
	}
}

// TestADeadTargetIsEjectedWithoutHealthSettings is issue 16's bug 9: with
// no health block a dead target stayed healthy forever and every request
// paid a connect attempt to it. Default passive ejection takes it out
// after three failed connects.
func TestADeadTargetIsEjectedWithoutHealthSettings(t *testing.T) {
	a := newBackend(t, "a", nil)
	dead := deadAddr(t)
	p := startProxy(t, upstreamYAML("", dead, a.addr()))
	for i := 0; i < 20; i++ {
		if resp, body := get(t, http.DefaultClient, p.url("web")+"/"); resp.StatusCode != 200 || body != "a" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if got := p.metric("switchboard_upstream_errors_total", map[string]string{"upstream": "app", "endpoint": dead, "kind": "connect"}); got != 3 {
		t.Fatalf("connect attempts on the dead target: %v, want 3 (then it is ejected)", got)
	}
	if st := p.upstream("app").Pool().Snapshot().All[0].Status(); st.State != endpoint.Ejected {
		t.Fatalf("the dead target is %s (%q), want ejected", st.State, st.Reason)
	}
}
