package plane_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// digest is how the echo backends describe a body: its length and hash.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%d %s", len(b), hex.EncodeToString(sum[:8]))
}

// sinkBackend reads each request body whole and answers with its digest;
// it counts the requests it is serving.
type sinkBackend struct {
	*backend
	inflight, maxInflight atomic.Int64
}

func newSinkBackend(t *testing.T, status func() int) *sinkBackend {
	s := &sinkBackend{}
	s.backend = newBackend(t, "sink", func(w http.ResponseWriter, r *http.Request) {
		n := s.inflight.Add(1)
		defer s.inflight.Add(-1)
		for m := s.maxInflight.Load(); n > m && !s.maxInflight.CompareAndSwap(m, n); m = s.maxInflight.Load() {
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("X-Content-Length", fmt.Sprint(r.ContentLength))
		if status != nil {
			w.WriteHeader(status())
		}
		io.WriteString(w, digest(body))
	})
	return s
}

// spilledFiles counts this process's open files that were created in dir
// and unlinked: the bodies buffer_requests keeps on disk.
func spilledFiles(t *testing.T, dir string) int {
	t.Helper()
	return testutil.OpenFiles(t, func(target string) bool {
		return strings.HasPrefix(target, filepath.Join(dir, "switchboard-body-")) && strings.HasSuffix(target, " (deleted)")
	})
}

func bufferYAML(b *backend, listenerExtra, routeExtra string) string {
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
` + listenerExtra + `    routes:
      - match: {path_prefix: /}
        upstream: app
` + routeExtra + `upstreams:
  app:
    targets: [{address: ` + b.addr() + `}]
`
}

// Issue 16, bug 8: with bodies streamed, 100 clients uploading at 1 byte/s
// held 100 upstream connections until the route's timeout. A route with
// buffer_requests reads the whole body before it picks an endpoint: slow
// uploads hold no upstream connection, and the body arrives intact.
func TestSlowUploadsHoldNoUpstreamConnectionWhenBuffered(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts spilled files through /proc")
	}
	sink := newSinkBackend(t, nil)
	dir := t.TempDir()
	p := startProxy(t, bufferYAML(sink.backend, "", "        buffer_requests: {memory: 1KiB, max: 1MiB, dir: "+dir+"}\n"))
	addr := p.srv.Addr("web")

	const clients = 50
	body := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 4096+i) }
	type upload struct {
		c  net.Conn
		br *bufio.Reader
	}
	ups := make([]upload, clients)
	for i := range ups {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		b := body(i)
		fmt.Fprintf(c, "POST /up/%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", i, len(b))
		br := bufio.NewReader(c)
		// 100 Continue: the proxy has started to read the body.
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
			t.Fatalf("client %d: %q, %v; want 100 Continue", i, line, err)
		}
		br.ReadString('\n')
		c.Write(b[:len(b)/2]) // over the 1 KiB in memory: spilled
		ups[i] = upload{c, br}
	}
	// Streaming, the proxy would have connected upstream and sent the
	// header before it read the body (and sent 100 Continue).
	noUpstream := func(when string) {
		t.Helper()
		open := int64(0)
		for _, u := range p.srv.Upstreams() {
			for _, s := range u.ConnStats() {
				open += s[0]
			}
		}
		if n := sink.conns.Load(); n != 0 || open != 0 || sink.inflight.Load() != 0 {
			t.Fatalf("%s: backend saw %d connections, the proxy holds %d upstream connections, %d requests in flight; want none",
				when, n, open, sink.inflight.Load())
		}
	}
	noUpstream(fmt.Sprintf("%d clients mid-upload", clients))
	testutil.WaitFor(t, 10*time.Second, "every half-sent body spilled to a file", func() bool {
		return spilledFiles(t, dir) == clients
	})
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("buffer dir holds %d names while bodies are spilled; want them unlinked at once", len(ents))
	}
	noUpstream("half of every body read")
	// A quick request meanwhile goes straight through.
	resp, got := get(t, http.DefaultClient, p.url("web")+"/quick")
	if resp.StatusCode != 200 || got != digest(nil) {
		t.Fatalf("quick request while uploads trickle: %d %q", resp.StatusCode, got)
	}

	for i, u := range ups {
		b := body(i)
		u.c.Write(b[len(b)/2:])
		resp, err := http.ReadResponse(u.br, nil)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != digest(b) || resp.Header.Get("X-Content-Length") != fmt.Sprint(len(b)) {
			t.Fatalf("client %d: %d %q (Content-Length upstream %s); want 200 %q", i, resp.StatusCode, got, resp.Header.Get("X-Content-Length"), digest(b))
		}
	}
	// Each temporary file went with its request: the answer is written
	// after the body is released.
	if n := spilledFiles(t, dir); n != 0 {
		t.Fatalf("%d spilled bodies still open after every request ended", n)
	}
	if m := sink.maxInflight.Load(); m > 2 {
		t.Errorf("backend had %d requests at once; the uploads came to it only once whole and one after another", m)
	}
}

func TestBufferedBodyLimitsAndFraming(t *testing.T) {
	sink := newSinkBackend(t, nil)
	dir := t.TempDir()
	p := startProxy(t, bufferYAML(sink.backend, "", "        buffer_requests: {memory: 1KiB, max: 64KiB, dir: "+dir+"}\n"))
	url := p.url("web") + "/up"
	post := func(body io.Reader) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(url, "application/octet-stream", body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	over := bytes.Repeat([]byte("x"), 64<<10+1)
	// With a Content-Length over max: refused before a byte of it is read.
	if resp, body := post(bytes.NewReader(over)); resp.StatusCode != 413 || resp.Header.Get("X-Switchboard-Error") != "body_too_large" ||
		!strings.Contains(body, "buffer_requests.max 65536") {
		t.Errorf("65537-byte body: %d %s; want 413 body_too_large naming buffer_requests.max", resp.StatusCode, body)
	}
	// Chunked: refused once it runs over.
	if resp, body := post(io.MultiReader(bytes.NewReader(over))); resp.StatusCode != 413 {
		t.Errorf("65537-byte chunked body: %d %s; want 413", resp.StatusCode, body)
	}
	// Within max, chunked or not, in memory or on disk: whole, and sent
	// upstream with its length.
	for _, n := range []int{1, 1024, 1025, 64 << 10} {
		b := bytes.Repeat([]byte("y"), n)
		for _, chunked := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(b)
			if chunked {
				r = io.MultiReader(r)
			}
			resp, body := post(r)
			if resp.StatusCode != 200 || body != digest(b) || resp.Header.Get("X-Content-Length") != fmt.Sprint(n) {
				t.Errorf("%d bytes (chunked %v): %d %q, upstream Content-Length %s; want 200 %q with the length",
					n, chunked, resp.StatusCode, body, resp.Header.Get("X-Content-Length"), digest(b))
			}
		}
	}
	if n := sink.conns.Load(); n == 0 {
		t.Fatal("backend never reached")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 || spilledFiles(t, dir) != 0 {
		t.Fatalf("buffer dir left with %d files, %d open", len(ents), spilledFiles(t, dir))
	}

	// A lower max_body_bytes on the listener wins.
	p2 := startProxy(t, bufferYAML(sink.backend, "    max_body_bytes: 2KiB\n", "        buffer_requests: {}\n"))
	resp, err := http.Post(p2.url("web")+"/up", "text/plain", io.MultiReader(bytes.NewReader(make([]byte, 3000))))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(body), "max_body_bytes 2048") {
		t.Errorf("3000-byte chunked body under max_body_bytes 2KiB: %d %s; want 413 naming max_body_bytes", resp.StatusCode, body)
	}
}

// A buffered body is replayable whatever its size: a retry sends it whole
// again (the unbuffered path keeps only body_limit bytes for that).
func TestBufferedBodyIsSentWholeOnRetry(t *testing.T) {
	var first atomic.Bool
	status := func() int {
		if first.CompareAndSwap(false, true) {
			return 503
		}
		return 200
	}
	a, b := newSinkBackend(t, status), newSinkBackend(t, status)
	dir := t.TempDir()
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - upstream: app
        buffer_requests: {memory: 4KiB, dir: `+dir+`}
        retry: {attempts: 2, statuses: [503], body_limit: 1024}
upstreams:
  app:
    targets: [{address: `+a.addr()+`}, {address: `+b.addr()+`}]
`)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB, on disk
	req, _ := http.NewRequest("PUT", p.url("web")+"/doc", io.MultiReader(bytes.NewReader(payload)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != digest(payload) {
		t.Fatalf("PUT of 128 KiB with a 503 first: %d %q; want the retry's 200 %q", resp.StatusCode, got, digest(payload))
	}
	if a.conns.Load() != 1 || b.conns.Load() != 1 {
		t.Fatalf("backends saw %d and %d connections; want one attempt each", a.conns.Load(), b.conns.Load())
	}
}

// timeouts.read_body cuts a body that stops coming with 408 (nginx's
// client_body_timeout), whether the route buffers it or streams it, and
// over TLS (HTTP/1.1 and HTTP/2) too; a slow body that keeps coming is
// not cut.
func TestStalledBodyIsCutWith408(t *testing.T) {
	sink := newSinkBackend(t, nil)
	cert, key := writeSelfSigned(t)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    timeouts: {read_body: 300ms}
    routes:
      - {match: {path_prefix: /buffered}, upstream: app, buffer_requests: {}}
      - {upstream: app}
  - name: tls
    listen: 127.0.0.1:0
    tls: {cert_file: `+cert+`, key_file: `+key+`}
    timeouts: {read_body: 300ms}
    routes:
      - {match: {path_prefix: /buffered}, upstream: app, buffer_requests: {}}
      - {upstream: app}
upstreams:
  app:
    targets: [{address: `+sink.addr()+`}]
`)
	for _, path := range []string{"/buffered", "/streamed"} {
		c, err := net.Dial("tcp", p.srv.Addr("web"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789", path)
		// ... and nothing more.
		start := time.Now()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 408 || resp.Header.Get("X-Switchboard-Error") != "request_timeout" || !resp.Close {
			t.Errorf("%s: stalled body got %d %s (close %v); want 408 request_timeout and the connection closed", path, resp.StatusCode, body, resp.Close)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after the 408 the connection is still open (%v)", path, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: cut after %v; want about read_body (300ms)", path, d)
		}
	}
	// The streamed request reached the backend; the proxy cut its upstream
	// exchange, which the backend sees a moment later.
	testutil.WaitFor(t, 5*time.Second, "the backend to let go of the cut requests", func() bool { return sink.inflight.Load() == 0 })

	// Over TLS: HTTP/1.1 and HTTP/2 streams.
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		for _, path := range []string{"/buffered", "/streamed"} {
			pr, pw := io.Pipe()
			defer pw.Close()
			go pw.Write([]byte("0123456789")) // and nothing more
			req, _ := http.NewRequest("POST", "https://"+p.srv.Addr("tls")+path, pr)
			req.ContentLength = 100
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("TLS h2=%v %s: %v", h2, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 408 || resp.Header.Get("X-Switchboard-Error") != "request_timeout" {
				t.Errorf("TLS h2=%v %s: stalled body got %s %d %s %v; want 408 request_timeout", h2, path, resp.Proto, resp.StatusCode, body, resp.Header)
			}
		}
	}

	// A body that keeps coming, however slowly, is not cut: the timeout is
	// between reads, not on the whole body.
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	payload := []byte("0123456789")
	fmt.Fprintf(c, "POST /buffered HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(payload))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond) // a slow client: 10 bytes/s, over 1s in all
		defer tick.Stop()
		for i := range payload {
			<-tick.C
			c.Write(payload[i : i+1])
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(got) != digest(payload) {
		t.Fatalf("a body trickling at 10 bytes/s under read_body 300ms: %d %q; want 200", resp.StatusCode, got)
	}
}
