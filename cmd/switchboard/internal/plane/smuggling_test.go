package plane_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// desyncRecorder is a backend that parses what reaches it the way a lenient
// backend would (http.ReadRequest, request after request on each
// connection), answers each request 200, and records every target it saw.
// If a request the proxy did not route ever shows up here, the proxy and
// the backend disagreed about where one request ended: a desync.
type desyncRecorder struct {
	addr string
	mu   sync.Mutex
	seen []string
}

func newDesyncRecorder(t *testing.T) *desyncRecorder {
	r := &desyncRecorder{}
	r.addr = serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.seen = append(r.seen, req.Method+" "+req.RequestURI)
			r.mu.Unlock()
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return r
}

func (r *desyncRecorder) targets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// smuggleYAML routes /public to the desyncRecorder and nothing else: a request
// for /admin must never reach it.
func smuggleYAML(backend string, tls string) string {
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
` + tls + `    routes:
      - match: {path_prefix: /public}
        upstream: app
upstreams:
  app:
    targets: [{address: ` + backend + `}]
`
}

// exchangeRaw writes raw to the proxy on one connection and returns what
// came back until the proxy closed it or went quiet.
func exchangeRaw(t *testing.T, tr transport, addr, raw string) (string, bool) {
	t.Helper()
	c := tr.dial(t, addr)
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	var out bytes.Buffer
	_, err := io.Copy(&out, c)
	closed := err == nil // EOF: the proxy closed; a timeout: it kept the connection
	return out.String(), closed
}

const smuggled = "GET /admin HTTP/1.1\r\nHost: web\r\n\r\n"

// TestNoRequestSmugglingVariantReachesTheBackend sends the published
// desync variants (CL.TE, TE.CL, TE.TE obfuscations, CL.0, chunk-size and
// chunk-extension tricks, obs-fold, bare CR and LF, HTTP/1.0 framing,
// pipelining after an error) through a real listener, cleartext and TLS,
// each with a hidden request for /admin, which no route sends anywhere.
// The backend must only ever see /public.
func TestNoRequestSmugglingVariantReachesTheBackend(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testNoRequestSmugglingVariantReachesTheBackend(t, tr) })
	}
}

func testNoRequestSmugglingVariantReachesTheBackend(t *testing.T, tr transport) {
	rec := newDesyncRecorder(t)
	p := startProxy(t, tr.configure(t, smuggleYAML(rec.addr, "")))
	addr := p.srv.Addr("web")
	head := "POST /public HTTP/1.1\r\nHost: web\r\n"
	chunkedSmuggle := "0\r\n\r\n" + smuggled
	cases := []struct {
		name string
		raw  string
		// reject: the proxy must answer 400 and close the connection.
		reject bool
	}{
		{"CL.TE", head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedSmuggle, true},
		{"TE.CL", head + "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n" + chunkedSmuggle, true},
		{"TE.TE xchunked", head + "Transfer-Encoding: xchunked\r\nContent-Length: 40\r\n\r\n" + chunkedSmuggle, false},
		{"TE space before colon", head + "Transfer-Encoding : chunked\r\nContent-Length: 40\r\n\r\n" + chunkedSmuggle, false},
		{"TE chunked, identity", head + "Transfer-Encoding: chunked, identity\r\n\r\n" + chunkedSmuggle, false},
		{"TE identity, chunked", head + "Transfer-Encoding: identity, chunked\r\n\r\n" + chunkedSmuggle, false},
		{"TE tab", head + "Transfer-Encoding:\tchunked\r\nContent-Length: 40\r\n\r\n" + chunkedSmuggle, false},
		{"two TE headers", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n" + chunkedSmuggle, false},
		{"TE obs-fold", head + "Transfer-Encoding:\r\n chunked\r\nContent-Length: 40\r\n\r\n" + chunkedSmuggle, false},
		{"TE CHUNKED", head + "Transfer-Encoding: CHUNKED\r\n\r\n" + chunkedSmuggle, false},
		{"two Content-Lengths", head + "Content-Length: 0\r\nContent-Length: 40\r\n\r\n" + smuggled, false},
		{"Content-Length list", head + "Content-Length: 0, 40\r\n\r\n" + smuggled, false},
		{"Content-Length +", head + "Content-Length: +40\r\n\r\n" + smuggled, false},
		{"Content-Length hex", head + "Content-Length: 0x28\r\n\r\n" + smuggled, false},
		{"CL.0 (a GET's body holds a request)", "GET /public HTTP/1.1\r\nHost: web\r\nContent-Length: 34\r\n\r\n" + smuggled, false},
		{"chunk size overflow", head + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff1\r\nx\r\n" + chunkedSmuggle, false},
		{"chunk size with leading space", head + "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n" + chunkedSmuggle, false},
		{"chunk extension with a quote", head + "Transfer-Encoding: chunked\r\n\r\n5;a=\"\r\nhello\r\n" + chunkedSmuggle, false},
		{"chunk lines with bare LF", head + "Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n" + smuggled, false},
		{"bare CR in a header", head + "X-A: a\rContent-Length: 40\r\nContent-Length: 0\r\n\r\n" + smuggled, false},
		{"bare LF line endings", "GET /public HTTP/1.1\nHost: web\n\n" + smuggled, false},
		{"HTTP/1.0 with Transfer-Encoding", "POST /public HTTP/1.0\r\nHost: web\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedSmuggle, true},
		{"pipelined after a bad request", "GET /public HTTP/1.1\r\nHost: web\r\nHost: other\r\n\r\n" + smuggled, false},
		{"space in the request line", "GET /public /admin HTTP/1.1\r\nHost: web\r\n\r\n" + smuggled, false},
		{"NUL in a header", head + "X-A: a\x00b\r\nContent-Length: 0\r\n\r\n" + smuggled, false},
		{"Expect with CL.TE", head + "Expect: 100-continue\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedSmuggle, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(rec.targets())
			got, closed := exchangeRaw(t, tr, addr, c.raw)
			for _, tgt := range rec.targets()[before:] {
				if !strings.HasPrefix(tgt, "POST /public") && !strings.HasPrefix(tgt, "GET /public") {
					t.Fatalf("the backend saw %q, which no route sends: a desync (proxy answered %q)", tgt, got)
				}
			}
			if c.reject && (!strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed || strings.Count(got, "HTTP/1.1 ") != 1) {
				t.Fatalf("want one 400 and the connection closed; got closed=%v:\n%s", closed, got)
			}
		})
	}
	if n := len(rec.targets()); n == 0 {
		t.Fatal("the backend saw no request at all: the suite proves nothing")
	}
}

// TestNoHTTP2FramingTrickReachesTheBackend: a client speaking HTTP/2 (TLS
// with ALPN h2) to an HTTP/1 upstream sends a content-length that its DATA
// does not match, a transfer-encoding header, and CR/LF in a header value
// and in a pseudo-header. None may put a request the proxy did not route
// in front of the backend.
func TestNoHTTP2FramingTrickReachesTheBackend(t *testing.T) {
	rec := newDesyncRecorder(t)
	cert, key := writeSelfSigned(t)
	p := startProxy(t, smuggleYAML(rec.addr, "    tls: {cert_file: "+cert+", key_file: "+key+"}\n"))
	addr := p.srv.Addr("web")
	type hf = hpack.HeaderField
	base := func(method, path string) []hf {
		return []hf{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "web"}, {Name: ":path", Value: path}}
	}
	cases := []struct {
		name    string
		headers []hf
		data    string
	}{
		{"content-length shorter than the data", append(base("POST", "/public"), hf{Name: "content-length", Value: "1"}), "x" + smuggled},
		{"content-length longer than the data", append(base("POST", "/public"), hf{Name: "content-length", Value: "400"}), smuggled},
		{"transfer-encoding in h2", append(base("POST", "/public"), hf{Name: "transfer-encoding", Value: "chunked"}), chunkedSmuggleBody()},
		{"CRLF in a header value", append(base("GET", "/public"), hf{Name: "x-a", Value: "a\r\n\r\n" + smuggled}), ""},
		{"CRLF in :path", base("GET", "/public HTTP/1.1\r\nHost: web\r\n\r\nGET /admin"), ""},
		{"CRLF in :authority", []hf{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "web\r\n\r\n" + smuggled}, {Name: ":path", Value: "/public"}}, ""},
		{"connection-specific header", append(base("GET", "/public"), hf{Name: "connection", Value: "close"}), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(rec.targets())
			sendH2(t, addr, c.headers, c.data)
			for _, tgt := range rec.targets()[before:] {
				if !strings.HasPrefix(tgt, "POST /public") && !strings.HasPrefix(tgt, "GET /public") {
					t.Fatalf("the backend saw %q, which no route sends: a desync", tgt)
				}
			}
		})
	}
}

func chunkedSmuggleBody() string { return "0\r\n\r\n" + smuggled }

// sendH2 opens a TLS connection with ALPN h2, sends one request built from
// raw header fields (no validation on our side) and its data, and reads
// frames until the stream ends or the server gives up on it.
func sendH2(t *testing.T, addr string, headers []hpack.HeaderField, data string) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range headers {
		enc.WriteField(h)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: data == ""}); err != nil {
		t.Fatal(err)
	}
	if data != "" {
		fr.WriteData(1, true, []byte(data))
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return // the server closed the connection, or went quiet
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return
		case *http2.DataFrame:
			if f.StreamEnded() {
				return
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				return
			}
		}
	}
}

// HTTP/2's :authority is not checked by net/http as an HTTP/1 Host is
// (only userinfo is refused): "web/admin" or "web\evil" would go upstream
// as the Host line and into {host}. The proxy refuses what an HTTP/1 Host
// could not be, with 400, before routing.
func TestHTTP2AuthorityIsCheckedAsAHost(t *testing.T) {
	rec := newDesyncRecorder(t)
	cert, key := writeSelfSigned(t)
	p := startProxy(t, smuggleYAML(rec.addr, "    tls: {cert_file: "+cert+", key_file: "+key+"}\n"))
	addr := p.srv.Addr("web")
	for _, c := range []struct {
		authority, status string
	}{
		{"web", "200"},
		{"web:443", "200"},
		{"[::1]:443", "200"},
		{"web/admin", "400"},
		{`web\evil`, "400"},
		{"web evil", "400"},
		{"web\tevil", "400"},
		{"we\"b", "400"},
	} {
		before := len(rec.targets())
		got := h2Status(t, addr, []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: c.authority}, {Name: ":path", Value: "/public"}})
		if got != c.status {
			t.Errorf(":authority %q: status %q, want %s", c.authority, got, c.status)
		}
		if n := len(rec.targets()) - before; c.status == "400" && n != 0 {
			t.Errorf(":authority %q reached the upstream", c.authority)
		}
	}
}

// h2Status sends one request of raw header fields over HTTP/2 (TLS, ALPN
// h2) and returns the :status of its answer, "" when none came.
func h2Status(t *testing.T, addr string, headers []hpack.HeaderField) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range headers {
		enc.WriteField(h)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return ""
		case *http2.MetaHeadersFrame:
			return f.PseudoValue("status")
		}
	}
}
