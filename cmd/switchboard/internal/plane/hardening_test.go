package plane_test

// Issue 16: the proxy tried as an attacker would, with raw sockets on
// both sides, so that the bytes on the wire are what is checked.

import (
	"bufio"
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
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
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
// Transfer-Encoding on HTTP/1.0, gets 400 and the connection closes; the
// request pipelined behind it never reaches the upstream.
func TestAmbiguousRequestFramingIsRefusedAndNothingBehindItIsForwarded(t *testing.T) {
	up, rec := recordingUpstream(t, okAnswer)
	p := startProxy(t, upstreamYAML("", up))
	addr := p.srv.Addr("web")
	second := "GET /second HTTP/1.1\r\nHost: a\r\n\r\n"
	for name, raw := range map[string]string{
		"CL and TE":               "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.0 with TE":        "GET /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.0 with TE and CL": "POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
	} {
		t.Run(name, func(t *testing.T) {
			resp := rawExchange(t, addr, raw+second)
			if !strings.HasPrefix(resp, "HTTP/1.1 400 ") || strings.Count(resp, "HTTP/1.1 ") != 1 || !strings.Contains(resp, "Connection: close\r\n") {
				t.Fatalf("want one 400 with Connection: close, then the close; got:\n%s", resp)
			}
			if seen := rec.seen(); len(seen) != 0 {
				t.Fatalf("the upstream was sent %d requests:\n%s", len(seen), strings.Join(seen, "---\n"))
			}
		})
	}
	// The same upstream does get a request whose framing is clear.
	resp := rawExchange(t, addr, "GET /clear HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 200 ") || len(rec.seen()) != 1 {
		t.Fatalf("a clear request: %d requests upstream, response:\n%s", len(rec.seen()), resp)
	}
}
