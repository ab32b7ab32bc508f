package plane_test

// Issue 16: the proxy tried as an attacker would, with raw sockets on
// both sides, so that the bytes on the wire are what is checked.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a raw HTTP/1.1 endpoint that keeps the head of every
// request it reads, as the bytes came.
type recorder struct {
	mu    sync.Mutex
	heads []string
}

// recordingUpstream starts a recorder that answers each request with
// answer(head), on keep-alive connections.
func recordingUpstream(t *testing.T, answer func(head string) string) (string, *recorder) {
	t.Helper()
	r := &recorder{}
	addr := serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.heads = append(r.heads, head)
			r.mu.Unlock()
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
			if err != nil {
				return
			}
			switch {
			case len(req.TransferEncoding) > 0:
				io.Copy(io.Discard, httputil.NewChunkedReader(br))
				readHead(br) // the trailer section
			case req.ContentLength > 0:
				io.CopyN(io.Discard, br, req.ContentLength)
			}
			if _, err := io.WriteString(c, answer(head)); err != nil {
				return
			}
		}
	})
	return addr, r
}

// readHead reads one message head, through its blank line, as it came.
func readHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" || line == "\n" {
			return b.String(), nil
		}
	}
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.heads...)
}

// rawExchange writes raw to the proxy and returns all it sends back until
// it closes the connection; it fails the test when the proxy leaves the
// connection open.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	return rawExchangeOver(t, transports[0], addr, raw)
}

// rawExchangeOver is rawExchange over transport tr.
func rawExchangeOver(t *testing.T, tr transport, addr, raw string) string {
	t.Helper()
	c := tr.dial(t, addr)
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the proxy left the connection open (%v) after sending:\n%s", err, b)
	}
	return string(b)
}

func okAnswer(string) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }

// TestAmbiguousRequestFramingIsRefusedAndNothingBehindItIsForwarded: a
// request with both Content-Length and Transfer-Encoding, or with
// Transfer-Encoding on HTTP/1.0, and an HTTP/1.1 request without a Host
// field or with a malformed or folded one, gets 400 and the connection
// closes; the request pipelined behind it never reaches the upstream. On
// cleartext and TLS listeners alike (issue 16: over TLS, net/http's
// server used to serve the ambiguous framings).
func TestAmbiguousRequestFramingIsRefusedAndNothingBehindItIsForwarded(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			up, rec := recordingUpstream(t, okAnswer)
			p := startProxy(t, tr.configure(t, upstreamYAML("", up)))
			addr := p.srv.Addr("web")
			second := "GET /second HTTP/1.1\r\nHost: a\r\n\r\n"
			for name, raw := range map[string]string{
				"CL and TE":                         "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
				"HTTP/1.0 with TE":                  "GET /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
				"HTTP/1.0 with TE and CL":           "POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
				"no Host":                           "GET /first HTTP/1.1\r\nX-A: a\r\n\r\n",
				"no Host, absolute-form target":     "GET http://a/first HTTP/1.1\r\nX-A: a\r\n\r\n",
				"malformed Host":                    "GET /first HTTP/1.1\r\nHost: a b\r\n\r\n",
				"malformed Host, absolute-form":     "GET http://a/first HTTP/1.1\r\nHost: a/b\r\n\r\n",
				"folded Host":                       "GET /first HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
				"folded Host, absolute-form target": "GET http://a/first HTTP/1.1\r\nHost: a\r\n\tb\r\n\r\n",
			} {
				t.Run(name, func(t *testing.T) {
					resp := rawExchangeOver(t, tr, addr, raw+second)
					if !strings.HasPrefix(resp, "HTTP/1.1 400 ") || strings.Count(resp, "HTTP/1.1 ") != 1 || !strings.Contains(resp, "Connection: close\r\n") {
						t.Fatalf("want one 400 with Connection: close, then the close; got:\n%s", resp)
					}
					if seen := rec.seen(); len(seen) != 0 {
						t.Fatalf("the upstream was sent %d requests:\n%s", len(seen), strings.Join(seen, "---\n"))
					}
				})
			}
			// The same upstream does get a request whose framing is clear.
			resp := rawExchangeOver(t, tr, addr, "GET /clear HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			if !strings.HasPrefix(resp, "HTTP/1.1 200 ") || len(rec.seen()) != 1 {
				t.Fatalf("a clear request: %d requests upstream, response:\n%s", len(rec.seen()), resp)
			}
		})
	}
}

// headerOf returns the value of the first field called name in a raw
// head, and whether there is one.
func headerOf(head, name string) (string, bool) {
	for _, line := range strings.Split(head, "\n")[1:] {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// TestUpgradeIsIgnoredOnHTTP10AndH2CIsNeverTunnelled: an HTTP/1.0
// request's Upgrade is not a protocol switch (RFC 9110 7.8), and an
// upgrade to h2c is never tunnelled (it would carry HTTP/2 past the
// proxy's routing); both go upstream as plain requests, without Upgrade.
// An HTTP/1.1 WebSocket upgrade still switches.
func TestUpgradeIsIgnoredOnHTTP10AndH2CIsNeverTunnelled(t *testing.T) {
	// The upstream switches to whatever it is asked to.
	up, rec := recordingUpstream(t, func(head string) string {
		if proto, ok := headerOf(head, "Upgrade"); ok {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n\r\n"
		}
		return okAnswer(head)
	})
	p := startProxy(t, upstreamYAML("", up))
	addr := p.srv.Addr("web")
	send := func(t *testing.T, raw string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for name, raw := range map[string]string{
		"HTTP/1.0 websocket": "GET /ws HTTP/1.0\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"h2c":                "GET /h2c HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
		"h2c among others":   "GET /h2c HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: websocket, H2C\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			n := len(rec.seen())
			if resp := send(t, raw); resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200: the request must not switch protocols", resp.StatusCode)
			}
			seen := rec.seen()
			if len(seen) != n+1 {
				t.Fatalf("the upstream got %d requests, want 1", len(seen)-n)
			}
			head := seen[n]
			for _, f := range []string{"Upgrade", "Connection", "HTTP2-Settings"} {
				if v, ok := headerOf(head, f); ok {
					t.Errorf("the upstream was sent %s: %s", f, v)
				}
			}
		})
	}
	if resp := send(t, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"); resp.StatusCode != 101 {
		t.Fatalf("an HTTP/1.1 WebSocket upgrade: status %d, want 101", resp.StatusCode)
	}
}

// TestHopByHopResponseFieldsNeverReachTheClient: the fields the upstream
// names in Connection are removed also when Connection says close (which
// http.ReadResponse drops before the proxy sees it), however Connection is
// spelled or folded and however long the head; Proxy-Authenticate and
// Proxy-Authorization are the proxy's, not the client's.
func TestHopByHopResponseFieldsNeverReachTheClient(t *testing.T) {
	rest := "X-Secret: s\r\nProxy-Authenticate: Basic realm=\"upstream\"\r\nProxy-Authorization: Basic eDp5\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTe: trailers\r\nX-Public: yes\r\nContent-Length: 2\r\n\r\nok"
	answers := map[string]string{
		"/close":  "HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\n" + rest,
		"/lower":  "HTTP/1.1 200 OK\r\nconnection: CLOSE,x-secret\r\n" + rest,
		"/twice":  "HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nConnection: close\r\n" + rest,
		"/folded": "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Secret\r\n" + rest,
		"/long":   "HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 6000) + "\r\nConnection: close, X-Secret\r\n" + rest,
		"/open":   "HTTP/1.1 200 OK\r\nConnection: X-Secret\r\n" + rest,
		"/kept":   "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: Keep-Alive , X-Secret\r\n" + rest,
		"/http10": "HTTP/1.0 200 OK\r\nConnection: X-Secret\r\n" + rest,
	}
	up, _ := recordingUpstream(t, func(head string) string {
		path := strings.Fields(head)[1]
		return answers[path]
	})
	p := startProxy(t, upstreamYAML("", up))
	addr := p.srv.Addr("web")
	for path := range answers {
		t.Run(path, func(t *testing.T) {
			resp := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			head, _, _ := strings.Cut(resp, "\r\n\r\n")
			head += "\r\n"
			if !strings.HasPrefix(head, "HTTP/1.1 200 ") {
				t.Fatalf("response:\n%s", resp)
			}
			for _, f := range []string{"X-Secret", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te"} {
				if v, ok := headerOf(head, f); ok {
					t.Errorf("%s reached the client: %s", f, v)
				}
			}
			// The proxy's own Connection: close answers the client's.
			if v, _ := headerOf(head, "Connection"); v != "close" {
				t.Errorf("Connection: %s", v)
			}
			if v, _ := headerOf(head, "X-Public"); v != "yes" {
				t.Errorf("an end-to-end field was lost: X-Public %q", v)
			}
		})
	}
}

// TestSwitchingProtocolsCarriesNoHopByHopFieldButTheSwitch: the 101 the
// client gets has the upstream's end-to-end fields and Connection: Upgrade
// with the upstream's Upgrade, but none of the upstream's other hop-by-hop
// fields; the tunnel then carries bytes both ways.
func TestSwitchingProtocolsCarriesNoHopByHopFieldButTheSwitch(t *testing.T) {
	up := serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, X-Secret\r\nUpgrade: websocket\r\n"+
			"X-Secret: s\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
		io.Copy(c, br) // echo
	})
	p := startProxy(t, upstreamYAML("", up))
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	head, err := readHead(br)
	if err != nil || !strings.HasPrefix(head, "HTTP/1.1 101 ") {
		t.Fatalf("head %q, %v", head, err)
	}
	for _, f := range []string{"X-Secret", "Keep-Alive", "Proxy-Authenticate"} {
		if v, ok := headerOf(head, f); ok {
			t.Errorf("%s reached the client: %s", f, v)
		}
	}
	conn, _ := headerOf(head, "Connection")
	upg, _ := headerOf(head, "Upgrade")
	acc, _ := headerOf(head, "Sec-WebSocket-Accept")
	if conn != "Upgrade" || upg != "websocket" || acc != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("the switch lost its fields:\n%s", head)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); line != "ping\n" {
		t.Fatalf("through the tunnel: %q, %v", line, err)
	}
}

// TestOversizedResponseHeaderIs502AndItsConnectionClosed: an endpoint's
// response head over max_response_header_bytes fails the request with 502
// upstream_error, the proxy stops reading it (a 64 MiB head, more than
// the kernel's socket buffers on both ends hold, cannot be sent whole) and
// closes the connection instead of pooling it; a head of exactly the cap
// goes through.
func TestOversizedResponseHeaderIs502AndItsConnectionClosed(t *testing.T) {
	const limit = 1024
	head := func(n int) string { // a response head of exactly n bytes
		h := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\nX-Pad: \r\n\r\n"
		return strings.Replace(h, "X-Pad: ", "X-Pad: "+strings.Repeat("p", n-len(h)), 1)
	}
	type fate struct {
		write, next error // writing the answer; reading what came after it
	}
	fates := make(chan fate, 10)
	// One request a connection: the proxy is to close each after its answer.
	up := serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := readHead(br)
		if err != nil {
			return
		}
		switch path := strings.Fields(req)[1]; path {
		case "/exact":
			io.WriteString(c, head(limit)+"ok")
			return
		case "/over":
			_, err = io.WriteString(c, head(limit+1)+"ok")
		case "/huge":
			_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Pad: ")
			pad := strings.Repeat("p", 64<<10)
			for i := 0; i < 1024 && err == nil; i++ {
				_, err = io.WriteString(c, pad)
			}
			if err == nil {
				_, err = io.WriteString(c, "\r\nContent-Length: 2\r\n\r\nok")
			}
		}
		// The proxy must close the connection, not pool it.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, next := br.ReadByte()
		fates <- fate{err, next}
	})
	p := startProxy(t, upstreamYAML("    max_response_header_bytes: 1KiB\n", up))
	addr := p.srv.Addr("web")
	check := func(path string) {
		t.Helper()
		resp := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		if h, _, _ := strings.Cut(resp, "\r\n\r\n"); !strings.HasPrefix(resp, "HTTP/1.1 502 ") || !strings.Contains(h, "X-Switchboard-Error: upstream_error") {
			t.Fatalf("%s: want 502 upstream_error, got:\n%.300s", path, resp)
		}
		f := <-fates
		var ne net.Error
		if errors.As(f.next, &ne) && ne.Timeout() {
			t.Fatalf("%s: the proxy kept the upstream connection open after the oversized head", path)
		}
		if path == "/huge" && f.write == nil {
			t.Fatalf("the upstream sent its 64 MiB head whole: the proxy read it all")
		}
	}
	if resp := rawExchange(t, addr, "GET /exact HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(resp, "HTTP/1.1 200 ") || !strings.HasSuffix(resp, "\r\n\r\nok") {
		t.Fatalf("a head of exactly max_response_header_bytes: got\n%.300s", resp)
	}
	check("/over")

	// The default cap (64KiB) against a 64 MiB head.
	p = startProxy(t, upstreamYAML("", up))
	addr = p.srv.Addr("web")
	check("/huge")
}

// TestOversizedResponseHeaderOverH2CIs502: the cap holds for h2c
// upstreams too (net/http's HTTP/2 client, told the cap).
func TestOversizedResponseHeaderOverH2CIs502(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	b := newBackendWith(t, "h2c", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("X-Pad", strings.Repeat("p", 2<<10))
		}
		io.WriteString(w, "ok")
	}, func(s *http.Server) { s.Protocols = &protos })
	p := startProxy(t, upstreamYAML("    protocol: h2c\n    max_response_header_bytes: 1KiB\n", b.addr()))
	if resp, body := get(t, http.DefaultClient, p.url("web")+"/small"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("a small head over h2c: %d %q", resp.StatusCode, body)
	}
	resp, body := get(t, http.DefaultClient, p.url("web")+"/big")
	if resp.StatusCode != 502 || resp.Header.Get("X-Switchboard-Error") != "upstream_error" {
		t.Fatalf("a 2 KiB head over h2c with a 1 KiB cap: %d %s", resp.StatusCode, body)
	}
}

// TestAnsweredExchangeOnAReusedConnectionIsNotSentAgain: the engine sends
// a request again on a fresh connection only when a reused one failed
// before any byte of an answer (the endpoint had closed it). An endpoint
// that did answer — here with a head over the cap — is not asked twice.
func TestAnsweredExchangeOnAReusedConnectionIsNotSentAgain(t *testing.T) {
	big := "HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 2<<10) + "\r\nContent-Length: 2\r\n\r\nok"
	var mu sync.Mutex
	n := 0
	up, rec := recordingUpstream(t, func(string) string {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 1 {
			return okAnswer("") // kept alive, so the next request reuses it
		}
		return big
	})
	p := startProxy(t, upstreamYAML("    max_response_header_bytes: 1KiB\n", up))
	if resp, body := get(t, http.DefaultClient, p.url("web")+"/first"); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, http.DefaultClient, p.url("web")+"/second"); resp.StatusCode != 502 {
		t.Fatalf("second: %d %s, want 502", resp.StatusCode, body)
	}
	if seen := rec.seen(); len(seen) != 2 {
		t.Fatalf("the upstream got %d requests, want 2 (the answered one was sent again)", len(seen))
	}
}

// TestUnansweredExchangeOnAReusedConnectionIsSentAgainAtOnce: the other
// side of the rule above — a reused connection that ends before any byte
// of an answer (the endpoint closed it as it was picked) costs the client
// nothing: the engine sends the request again on a fresh connection, no
// retry of the pipeline's needed.
func TestUnansweredExchangeOnAReusedConnectionIsSentAgainAtOnce(t *testing.T) {
	up := serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			if _, err := readHead(br); err != nil || i == 1 {
				return // the second request on a connection: closed unanswered
			}
			io.WriteString(c, okAnswer(""))
		}
	})
	p := startProxy(t, upstreamYAML("", up))
	for _, path := range []string{"/first", "/second"} {
		if resp, body := get(t, http.DefaultClient, p.url("web")+path); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	if n := p.metric("switchboard_upstream_retries_total", map[string]string{"upstream": "app"}); n != 0 {
		t.Fatalf("the pipeline retried %v times; the engine should have sent it again itself", n)
	}
}

// A field the client names in Connection is hop-by-hop (RFC 9110 7.6.1):
// it never reaches the upstream, on either engine (SWITCHBOARD_TEST_ENGINE).
func TestConnectionNamedRequestFieldsNeverReachTheUpstream(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`      - match: {path_prefix: /}
        upstream: app`, be.addr()))
	_, s := echoGet(t, p.url("web")+"/x", map[string]string{"Connection": "keep-alive, X-Secret", "X-Secret": "1", "X-Kept": "2"})
	if s.Header.Get("X-Secret") != "" || s.Header.Get("X-Kept") != "2" {
		t.Fatalf("the upstream saw X-Secret %q and X-Kept %q; want none and 2", s.Header.Get("X-Secret"), s.Header.Get("X-Kept"))
	}
}
