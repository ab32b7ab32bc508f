package plane_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// onEventLoop puts listener web of a configuration from upstreamYAML on
// the event-loop engine.
func onEventLoop(yaml string) string {
	return strings.Replace(yaml, "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    engine: eventloop\n", 1)
}

// onGoroutineEngine pins listener web of a configuration to the goroutine
// engine (SWITCHBOARD_TEST_ENGINE leaves a listener that names its engine
// alone): the tests that weigh a feature's allocations against the plain
// route's weigh both on the engine that serves the feature.
func onGoroutineEngine(yaml string) string {
	return strings.Replace(yaml, "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    engine: goroutine\n", 1)
}

// BenchmarkProxyHTTP1EventLoop is BenchmarkProxyHTTP1 on a listener with
// engine: eventloop: compare the two in one run.
func BenchmarkProxyHTTP1EventLoop(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("the event-loop engine is Linux only")
	}
	be := rawBackend(b)
	p := startProxy(b, onEventLoop(upstreamYAML("", be)))
	benchGets(b, func() (net.Conn, error) { return net.Dial("tcp", p.srv.Addr("web")) })
}

// TestEventLoopListenerProxiesAndHandsOffWhatItDoesNotServe runs a
// listener on the event-loop engine: a keep-alive GET is proxied with the
// forwarding fields and the request id, and a chunked upload on the same
// connection (served by the goroutine engine, after the hand-off) still
// reaches the upstream whole.
func TestEventLoopListenerProxiesAndHandsOffWhatItDoesNotServe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop engine is Linux only")
	}
	be := newBackend(t, "be", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Saw-XFF", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Saw-Id", r.Header.Get("X-Request-Id"))
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "secret")
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	})
	p := startProxy(t, onEventLoop(upstreamYAML("", be.addr())))
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: abc\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "GET /a " || resp.Header.Get("X-Saw-XFF") != "127.0.0.1" || resp.Header.Get("X-Saw-Id") != "abc" ||
		resp.Header.Get("X-Request-Id") != "abc" || resp.Header.Get("X-Hop") != "" {
		t.Fatalf("GET: %q, header %v", body, resp.Header)
	}
	io.WriteString(c, "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != "POST /b hello" {
		t.Fatalf("chunked upload after the hand-off: %q", body)
	}
}

// TestEventLoopHedgedRequestThenKeepAlive: on the event-loop engine a
// hedged request (its attempts run on a goroutine: a blocking step) is
// answered by the winner and counted once, and the requests that follow
// on the same connection each get their own answer.
func TestEventLoopHedgedRequestThenKeepAlive(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop engine is Linux only")
	}
	release := make(chan struct{})
	defer close(release)
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hedged" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "slow "+r.URL.Path+" "+r.Header.Get("X-N"))
	})
	fast := newBackend(t, "fast", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fast "+r.URL.Path+" "+r.Header.Get("X-N"))
	})
	p := startProxy(t, onEventLoop(limitYAML(`        retry: {attempts: 2, hedge_after: 30ms}`, slow.addr()+"}, {address: "+fast.addr())))
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	get := func(path, n string) string {
		t.Helper()
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nX-N: "+n+"\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// Round robin sends the first attempt to slow, which holds /hedged:
	// the hedge to fast wins.
	if got := get("/hedged", "0"); got != "fast /hedged 0" {
		t.Fatalf("hedged GET: %q, want the hedge's answer", got)
	}
	for i := 1; i <= 20; i++ {
		n := strconv.Itoa(i)
		got := get("/after/"+n, n)
		if !strings.HasSuffix(got, " /after/"+n+" "+n) {
			t.Fatalf("request %d after the hedge: %q", i, got)
		}
	}
	if got := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app", "reason": "hedge"}); got != 1 {
		t.Fatalf("hedges counted: %v, want 1", got)
	}
}
