package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// FuzzParseRequestHeadAgreesWithReadRequest holds the exported fast
// parser, as an event loop uses it (proxy/h1loop: HeadEnd over all it has
// read, ParseRequestHead on that head, the body the next ContentLength
// bytes), to http.ReadRequest on the same bytes. Wherever
// ParseRequestHead takes a head, net/http must accept it too, end the
// head at the same byte, build the same request (method, target, URL,
// version, Host, header, ContentLength, Close: every field) and, when
// the body has all arrived, read the same body and stop at the same byte
// after it; and the server's checks after parsing must refuse nothing but
// what the loop leaves to the goroutine engine itself (Expect, CONNECT).
// Where ParseRequestHead refuses, nothing is asserted: the loop hands the
// bytes to the goroutine engine, which parses them with net/http.
//
// Unlike FuzzRequestHeadMatchesNetHTTP, which looks at the server's own
// 4 KiB read buffer, HeadEnd here sees the whole input, so heads of any
// length reach the fast parser, as they do on a loop.
//
//	go test -run '^$' -fuzz=FuzzParseRequestHeadAgreesWithReadRequest -fuzztime=3m -parallel=1 ./proxy/h1
func FuzzParseRequestHeadAgreesWithReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n",
		"GET /a HTTP/1.0\nHost: x\nConnection: keep-alive\n\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nshort",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\n\r\n",
		"GET http://y/z HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT /x HTTP/1.1\r\nHost: x\r\n\r\n",
		"PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nhost : y\r\n\r\n",
		"GET / HTTP/1.1\r\nHOST: x:80\r\nCONTENT-LENGTH: 000\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nTrailer: T\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:8\r\nX-Long: " + string(bytes.Repeat([]byte{'v'}, 5000)) + "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		end := HeadEnd(raw)
		if end < 0 {
			return
		}
		ours, ok := ParseRequestHead(raw[:end])
		if !ok {
			return
		}
		r := bytes.NewReader(raw)
		br := bufio.NewReader(r)
		std, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("ParseRequestHead took a head net/http refuses (%v):\n%q", err, raw)
		}
		if n := at(r, br); n != end {
			t.Fatalf("HeadEnd ends the head at byte %d, net/http at %d:\n%q", end, n, raw)
		}
		if ours.Method != std.Method || ours.RequestURI != std.RequestURI || ours.Proto != std.Proto ||
			ours.Host != std.Host || ours.ContentLength != std.ContentLength || ours.Close != std.Close {
			t.Fatalf("ParseRequestHead read %q %q %q Host %q length %d close %v; net/http %q %q %q Host %q length %d close %v:\n%q",
				ours.Method, ours.RequestURI, ours.Proto, ours.Host, ours.ContentLength, ours.Close,
				std.Method, std.RequestURI, std.Proto, std.Host, std.ContentLength, std.Close, raw)
		}
		if !reflect.DeepEqual(*ours.URL, *std.URL) {
			t.Fatalf("URL: ParseRequestHead %#v, net/http %#v:\n%q", *ours.URL, *std.URL, raw)
		}
		if !reflect.DeepEqual(ours.Header, std.Header) {
			t.Fatalf("header: ParseRequestHead %q, net/http %q:\n%q", ours.Header, std.Header, raw)
		}
		o, s := *ours, *std
		o.URL, s.URL, o.Body, s.Body = nil, nil, nil, nil
		if !reflect.DeepEqual(o, s) {
			t.Fatalf("requests differ:\nParseRequestHead %#v\nnet/http         %#v\n%q", o, s, raw)
		}
		// The loop takes the body only when it has all of it: the
		// ContentLength bytes after the head.
		if bodyEnd := end + int(ours.ContentLength); bodyEnd <= len(raw) {
			b, err := io.ReadAll(std.Body)
			if err != nil || !bytes.Equal(b, raw[end:bodyEnd]) {
				t.Fatalf("body: the loop takes %q, net/http reads %q (%v):\n%q", raw[end:bodyEnd], b, err, raw)
			}
			if n := at(r, br); n != bodyEnd {
				t.Fatalf("after the body the loop goes on at byte %d, net/http at %d:\n%q", bodyEnd, n, raw)
			}
		}
		// The goroutine engine's checks after parsing: of those, the loop
		// makes only the ones on CONNECT and Expect itself (servable).
		var c conn
		if code, msg := c.check(std); code != 0 && std.Method != http.MethodConnect && std.Header["Expect"] == nil {
			t.Fatalf("ParseRequestHead took a head the server refuses after parsing (%d %s):\n%q", code, msg, raw)
		}
		if why := framingOf(raw[:end]).ambiguous(std); why != "" {
			t.Fatalf("ParseRequestHead took a head whose framing the server refuses (%s):\n%q", why, raw)
		}
	})
}

// TestParseRequestHeadLeavesAnEmptyHostToTheServer: an empty Host is
// valid syntax, which the server's checks refuse on HTTP/1.1 (400, as a
// missing one). The fast parser leaves such a head to them, so that an
// event loop, which serves what ParseRequestHead takes without those
// checks, never serves it (FuzzParseRequestHeadAgreesWithReadRequest
// found the loop would).
func TestParseRequestHeadLeavesAnEmptyHostToTheServer(t *testing.T) {
	for _, head := range []string{
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: \t\r\n\r\n",
		"0 / HTTP/1.1\nHost:\n\n",
	} {
		if _, ok := ParseRequestHead([]byte(head)); ok {
			t.Errorf("ParseRequestHead took %q, whose empty Host the server refuses", head)
		}
		var c conn
		std, err := http.ReadRequest(bufio.NewReader(bytes.NewReader([]byte(head))))
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		if code, _ := c.check(std); code != http.StatusBadRequest {
			t.Errorf("%q: the server's checks give %d, want 400", head, code)
		}
	}
}
