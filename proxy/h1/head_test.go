package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

// parsed is what the fast path and http.ReadRequest made of the same
// bytes. fast is false when the fast path left the head to
// http.ReadRequest.
type parsed struct {
	ours   *http.Request
	fr     framing
	fast   bool
	std    *http.Request
	stdErr error
	head   []byte
	// Each parser's reader.
	r1, r2   *bytes.Reader
	br1, br2 *bufio.Reader
}

// parseBoth gives raw to parseRequestHead and to http.ReadRequest, each
// on a reader of its own, as a server connection's (a 4 KiB buffer).
func parseBoth(raw []byte) (p parsed) {
	p.r1, p.r2 = bytes.NewReader(raw), bytes.NewReader(raw)
	p.br1, p.br2 = bufio.NewReaderSize(p.r1, 4096), bufio.NewReaderSize(p.r2, 4096)
	b, _ := p.br1.Peek(p.br1.Size())
	end := headEnd(b)
	if end < 0 {
		return p
	}
	p.head = b[:end]
	p.ours, p.fr, p.fast = parseRequestHead(p.head, p.br1, nil)
	if p.fast {
		p.br1.Discard(end)
	}
	p.std, p.stdErr = http.ReadRequest(p.br2)
	return p
}

// at is how much of its input a parser's reader has given out.
func at(r *bytes.Reader, br *bufio.Reader) int {
	return int(r.Size()) - r.Len() - br.Buffered()
}

// FuzzRequestHeadMatchesNetHTTP feeds the same bytes to the fast path's
// parser and to http.ReadRequest. Where the fast path takes a head,
// net/http must accept it too, read exactly as many bytes as the head,
// and produce the same request, field for field; and the server's checks
// after parsing (Host, framing, header syntax, Expect) must come to the
// same verdict on both. Where the fast path does not take a head,
// http.ReadRequest parses it, as before.
//
//	go test -run '^$' -fuzz=FuzzRequestHeadMatchesNetHTTP -fuzztime=5m -parallel=1 ./proxy/h1
func FuzzRequestHeadMatchesNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET /bench HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n",
		"GET /a/b;c=d?x=1&y=%20#f HTTP/1.0\nhost:  a:80 \nconnection: keep-alive, Close\n\n",
		"HEAD //x/../y?? HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nX-B:\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\t\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
		"GET /%41 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /! HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"G@T / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\r\n\r\n",
		"GET /  HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nabc",
		"POST /up HTTP/1.0\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := parseBoth(raw)
		ours, std, err, head := p.ours, p.std, p.stdErr, p.head
		if !p.fast {
			return
		}
		// head points into a reader's buffer, which reading the bodies
		// below may refill: read its framing now.
		stdFraming := framingOf(bytes.Clone(head))
		if err != nil {
			t.Fatalf("the fast path took a head net/http refuses (%v):\n%q", err, raw)
		}
		if n := at(p.r2, p.br2); n != len(head) {
			t.Fatalf("the fast path took %d bytes as the head, net/http %d:\n%q", len(head), n, raw)
		}
		if (ours.Body == http.NoBody) != (std.Body == http.NoBody) {
			t.Fatalf("bodies: fast path %T, net/http %T:\n%q", ours.Body, std.Body, raw)
		}
		ob, oerr := io.ReadAll(ours.Body)
		sb, serr := io.ReadAll(std.Body)
		if !bytes.Equal(ob, sb) || oerr != serr {
			t.Fatalf("bodies: fast path %q, %v; net/http %q, %v:\n%q", ob, oerr, sb, serr, raw)
		}
		if o, s := at(p.r1, p.br1), at(p.r2, p.br2); o != s {
			t.Fatalf("after the body the fast path is at byte %d, net/http at %d:\n%q", o, s, raw)
		}
		if !reflect.DeepEqual(*ours.URL, *std.URL) {
			t.Fatalf("URL: fast path %#v, net/http %#v:\n%q", *ours.URL, *std.URL, raw)
		}
		o, s := *ours, *std
		o.URL, s.URL, o.Body, s.Body = nil, nil, nil, nil
		if !reflect.DeepEqual(o, s) {
			t.Fatalf("requests differ:\nfast path %#v\nnet/http  %#v\n%q", o, s, raw)
		}
		var c conn
		oc, om := c.check(ours)
		sc, sm := c.check(std)
		if oc != sc || om != sm {
			t.Fatalf("server checks: fast path %d %q, net/http %d %q:\n%q", oc, om, sc, sm, raw)
		}
		if o, s := p.fr.ambiguous(ours), stdFraming.ambiguous(std); o != s {
			t.Fatalf("framing checks: fast path %q, net/http %q:\n%q", o, s, raw)
		}
	})
}

// TestRequestHeadFastPathTakesPlainRequests pins which heads the fast
// path takes (the common ones, so that they cost few allocations) and
// which it leaves to http.ReadRequest.
func TestRequestHeadFastPathTakesPlainRequests(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		fast bool
	}{
		{"GET /bench HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n", true},
		{"GET /a?b=c HTTP/1.0\nHost: a\n\n", true},
		{"DELETE /x HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\n\r\n", true},
		{"GET / HTTP/1.1\r\n\r\n", false},                          // no Host: 400 from the server's checks
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", false},    // refused by net/http
		{"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", false}, // obs-fold
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", true},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", false}, // repeated
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", false},                     // refused by net/http
		{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x\r\n\r\n", false},                       // framing
		{"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", false},                                       // absolute form
		{"GET /%7e HTTP/1.1\r\nHost: a\r\n\r\n", false},                                            // net/url unescapes
		{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", false},                                               // version
	} {
		if fast := parseBoth([]byte(tc.raw)).fast; fast != tc.fast {
			t.Errorf("fast path takes %q: %v, want %v", tc.raw, fast, tc.fast)
		}
	}
}

// BenchmarkReadRequestHead compares the fast path with http.ReadRequest
// on the benchmark's request.
func BenchmarkReadRequestHead(b *testing.B) {
	raw := []byte("GET /bench HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := parseRequestHead(raw, nil, nil); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		r := bytes.NewReader(raw)
		br := bufio.NewReader(r)
		for b.Loop() {
			r.Reset(raw)
			br.Reset(r)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzResponseHeadMatchesNetHTTP feeds the same bytes, as the answer to a
// GET or a HEAD, to the response fast path and to http.ReadResponse.
// Where the fast path takes a head, net/http must accept it too, read
// exactly as many bytes as the head, and produce the same response, field
// for field; and the two bodies must give the same bytes, end the same
// way and leave the same bytes behind.
//
//	go test -run '^$' -fuzz=FuzzResponseHeadMatchesNetHTTP -fuzztime=5m -parallel=1 ./proxy/h1
func FuzzResponseHeadMatchesNetHTTP(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",
		"HTTP/1.1 404\nconnection: keep-alive, x\ncontent-length:  0 \nx-a: 1\nX-A: 2\n\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nstale",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200\tOK\r\nContent-Length: 2\r\n\r\nok",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		req, _ := http.NewRequest(http.MethodGet, "http://e/", nil)
		if head {
			req.Method = http.MethodHead
		}
		r1 := bytes.NewReader(raw)
		br1 := bufio.NewReader(r1)
		b, _ := br1.Peek(br1.Size())
		end := headEnd(b)
		if end < 0 {
			return
		}
		ours, ok := parseResponseHead(b[:end], req, br1, nil)
		if !ok {
			return
		}
		br1.Discard(end)
		r2 := bytes.NewReader(raw)
		br2 := bufio.NewReader(r2)
		std, err := http.ReadResponse(br2, req)
		if err != nil {
			t.Fatalf("the fast path took a head net/http refuses (%v):\n%q", err, raw)
		}
		if n := len(raw) - r2.Len() - br2.Buffered(); n != end {
			t.Fatalf("the fast path took %d bytes as the head, net/http %d:\n%q", end, n, raw)
		}
		ob, oerr := io.ReadAll(ours.Body)
		sb, serr := io.ReadAll(std.Body)
		if !bytes.Equal(ob, sb) || oerr != serr {
			t.Fatalf("bodies: fast path %q, %v; net/http %q, %v:\n%q", ob, oerr, sb, serr, raw)
		}
		if (ours.Body == http.NoBody) != (std.Body == http.NoBody) {
			t.Fatalf("bodies: fast path %T, net/http %T:\n%q", ours.Body, std.Body, raw)
		}
		if o, s := len(raw)-r1.Len()-br1.Buffered(), len(raw)-r2.Len()-br2.Buffered(); o != s {
			t.Fatalf("after the body the fast path is at byte %d, net/http at %d:\n%q", o, s, raw)
		}
		o, s := *ours, *std
		o.Body, s.Body = nil, nil
		if !reflect.DeepEqual(o, s) {
			t.Fatalf("responses differ:\nfast path %#v\nnet/http  %#v\n%q", o, s, raw)
		}
	})
}

// TestResponseHeadFastPathTakesPlainResponses pins which response heads
// the fast path takes and which it leaves to http.ReadResponse.
func TestResponseHeadFastPathTakesPlainResponses(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		method string
		fast   bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok", "GET", true},
		{"HTTP/1.1 503\nContent-Length: 0\n\n", "POST", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HEAD", false},                     // no body whatever the length
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Close\r\n\r\nok", "GET", false}, // the field is kept for the caller
		{"HTTP/1.1 200 OK\r\n\r\nok", "GET", false},                                           // read to close
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "GET", false},      // chunked
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", "GET", false},      // 1xx
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\n\r\n", "GET", false},              // no body
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", "GET", false}, // repeated
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: 1\r\n\t2\r\n\r\nok", "GET", false},       // obs-fold
		{"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "GET", false},                      // version
	} {
		req, _ := http.NewRequest(tc.method, "http://e/", nil)
		br := bufio.NewReader(strings.NewReader(tc.raw))
		b, _ := br.Peek(len(tc.raw))
		if _, fast := parseResponseHead(b[:headEnd(b)], req, br, nil); fast != tc.fast {
			t.Errorf("fast path takes %q to %s: %v, want %v", tc.raw, tc.method, fast, tc.fast)
		}
	}
}

// TestLengthBodyEndsLikeNetHTTP pins the fast path's body: io.EOF with the
// last bytes, io.ErrUnexpectedEOF when the connection ends early, and no
// read after Close.
func TestLengthBodyEndsLikeNetHTTP(t *testing.T) {
	b := &lengthBody{r: bufio.NewReader(strings.NewReader("okrest")), n: 2}
	p := make([]byte, 8)
	if n, err := b.Read(p); n != 2 || err != io.EOF || string(p[:n]) != "ok" {
		t.Fatalf("read of a whole body: %d %q %v, want 2 \"ok\" EOF", n, p[:n], err)
	}
	b = &lengthBody{r: bufio.NewReader(strings.NewReader("ok")), n: 5}
	if got, err := io.ReadAll(b); string(got) != "ok" || err != io.ErrUnexpectedEOF {
		t.Fatalf("body cut short: %q %v, want \"ok\" and io.ErrUnexpectedEOF", got, err)
	}
	b.Close()
	if _, err := b.Read(p); err != http.ErrBodyReadAfterClose {
		t.Fatalf("read after close: %v, want http.ErrBodyReadAfterClose", err)
	}
}

// BenchmarkReadResponseHead compares the fast path with http.ReadResponse
// on a small response.
func BenchmarkReadResponseHead(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Tue, 01 Dec 2026 23:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\nX-Backend: b1\r\n\r\nok")
	req, _ := http.NewRequest(http.MethodGet, "http://e/", nil)
	end := headEnd(raw)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseResponseHead(raw[:end], req, nil, nil); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("fast-reuse", func(b *testing.B) {
		b.ReportAllocs()
		var ru Reuse
		for b.Loop() {
			if _, ok := parseResponseHead(raw[:end], req, nil, &ru); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		r := bytes.NewReader(raw)
		br := bufio.NewReader(r)
		for b.Loop() {
			r.Reset(raw)
			br.Reset(r)
			if _, err := http.ReadResponse(br, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFastPathsAllocateThreeTimesPerHead pins the fast paths' cost: one
// allocation for the message with its values and text, two for the
// header map (http.ReadRequest takes nine, http.ReadResponse eleven).
func TestFastPathsAllocateThreeTimesPerHead(t *testing.T) {
	reqHead := []byte("GET /bench HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() { parseRequestHead(reqHead, nil, nil) }); n > 3 {
		t.Errorf("parseRequestHead: %v allocations, want at most 3", n)
	}
	respHead := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n")
	req, _ := http.NewRequest(http.MethodGet, "http://e/", nil)
	if n := testing.AllocsPerRun(100, func() { parseResponseHead(respHead, req, nil, nil) }); n > 3 {
		t.Errorf("parseResponseHead: %v allocations, want at most 3", n)
	}
}

// TestReuseParsesRequestsIntoItsOwnMemory: with a Reuse, a request head
// is parsed with no allocation, into the Reuse's memory, and the next
// parse writes over the last request (which is why a caller keeps copies
// of what it keeps longer: see Reuse).
func TestReuseParsesRequestsIntoItsOwnMemory(t *testing.T) {
	var ru Reuse
	first := []byte("GET /first?a=1 HTTP/1.1\r\nHost: one.example\r\nUser-Agent: ua-1\r\n\r\n")
	second := []byte("POST /second HTTP/1.1\r\nHost: two.example\r\nContent-Length: 0\r\n\r\n")
	r1, ok := ParseRequestHeadReusing(first, &ru)
	if !ok {
		t.Fatal("first head refused")
	}
	if r1.Method != "GET" || r1.URL.Path != "/first" || r1.URL.RawQuery != "a=1" || r1.Host != "one.example" || r1.Header.Get("User-Agent") != "ua-1" {
		t.Fatalf("first request parsed as %s %s?%s host %q ua %q", r1.Method, r1.URL.Path, r1.URL.RawQuery, r1.Host, r1.Header.Get("User-Agent"))
	}
	r2, ok := ParseRequestHeadReusing(second, &ru)
	if !ok {
		t.Fatal("second head refused")
	}
	if r2 != r1 {
		t.Fatal("the second request is not in the Reuse's memory")
	}
	if r2.Method != "POST" || r2.URL.Path != "/second" || r2.URL.RawQuery != "" || r2.Host != "two.example" ||
		r2.Header.Get("User-Agent") != "" || r2.ContentLength != 0 {
		t.Fatalf("second request parsed as %s %s?%s host %q ua %q length %d: the first's left over",
			r2.Method, r2.URL.Path, r2.URL.RawQuery, r2.Host, r2.Header.Get("User-Agent"), r2.ContentLength)
	}
	if n := testing.AllocsPerRun(100, func() { ParseRequestHeadReusing(first, &ru) }); n != 0 {
		t.Errorf("a request head parsed with a Reuse: %v allocations, want 0", n)
	}
}

// TestScanNameAgreesWithTextproto: scanName's token check is isToken's,
// and a name it calls canonical is one net/textproto leaves as it is.
func TestScanNameAgreesWithTextproto(t *testing.T) {
	names := []string{
		"Host", "host", "HOST", "Content-Length", "content-length", "Content-length", "X-Request-Id",
		"X-Request-ID", "x-request-id", "X-1a", "X-1A", "X--Y", "X--y", "-X", "-x", "A", "a", "Www-Authenticate",
		"ETag", "Etag", "X_Y", "X_y", "X.Y", "X.y", "Tk!#$%&'*+.^_`|~z", "", "Bad Name", "Bad:", "Bad\x7f", "B\xe9",
	}
	for _, n := range names {
		token, canonical := scanName([]byte(n))
		if want := isToken([]byte(n)); token != want {
			t.Errorf("scanName(%q) token = %v, want %v", n, token, want)
		}
		if !token {
			continue
		}
		if want := textproto.CanonicalMIMEHeaderKey(n) == n; canonical != want {
			t.Errorf("scanName(%q) canonical = %v, want %v (textproto writes %q)", n, canonical, want, textproto.CanonicalMIMEHeaderKey(n))
		}
	}
}
