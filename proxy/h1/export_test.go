package h1

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestExportedParsersMatchTheServersAndNetHTTP: ParseRequestHead takes
// exactly what the server's fast path takes, and the request it makes
// agrees with http.ReadRequest's; ParseResponseHead agrees with
// http.ReadResponse on the common and the uncommon head.
func TestExportedParsersMatchTheServersAndNetHTTP(t *testing.T) {
	for _, head := range []string{
		"GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
		"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\nHost: x\r\n\r\n",
	} {
		if end := HeadEnd([]byte(head + "rest")); end != len(head) {
			t.Fatalf("HeadEnd(%q) = %d, want %d", head, end, len(head))
		}
		_, _, fast := parseRequestHead([]byte(head), bufio.NewReader(strings.NewReader("")), nil)
		req, ok := ParseRequestHead([]byte(head))
		if ok != fast {
			t.Fatalf("%q: ParseRequestHead ok=%v, the server's fast path %v", head, ok, fast)
		}
		if !ok {
			continue
		}
		want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			t.Fatal(err)
		}
		if req.Method != want.Method || req.RequestURI != want.RequestURI || req.Host != want.Host ||
			req.ContentLength != want.ContentLength || len(req.Header) != len(want.Header) || req.Body != http.NoBody {
			t.Fatalf("%q: got %+v, want %+v", head, req, want)
		}
	}
	get := &http.Request{Method: "GET"}
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.0 200 OK\r\nX: y\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\r\n",
	} {
		resp, err := ParseResponseHead([]byte(head), get)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), get)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want.StatusCode || resp.ContentLength != want.ContentLength || resp.Close != want.Close ||
			len(resp.TransferEncoding) != len(want.TransferEncoding) || resp.Body != http.NoBody {
			t.Fatalf("%q: got %+v, want %+v", head, resp, want)
		}
		if strings.Contains(head, "X-Hop") && resp.Header.Get("Connection") == "" {
			t.Fatalf("%q: the Connection field naming X-Hop was dropped", head)
		}
	}
}

// TestConnectionNamesKeepsOnlyAConnectionThatNamesFields: a Connection
// that names nothing but Keep-Alive comes back nil, any other name keeps
// it whole; and HopByHopResponseField answers the same with either.
func TestConnectionNamesKeepsOnlyAConnectionThatNamesFields(t *testing.T) {
	for _, tc := range []struct {
		conn  []string
		names bool
	}{
		{nil, false},
		{[]string{"keep-alive"}, false},
		{[]string{"Keep-Alive", " keep-alive ,,\t"}, false},
		{[]string{""}, false},
		{[]string{"close"}, true},
		{[]string{"keep-alive, X-Secret"}, true},
		{[]string{"keep-alive", "x-secret"}, true},
		{[]string{"keep-alive-x"}, true},
	} {
		got := ConnectionNames(tc.conn)
		if (got != nil) != tc.names || got != nil && len(got) != len(tc.conn) {
			t.Errorf("ConnectionNames(%q) = %q, want names %v", tc.conn, got, tc.names)
		}
		for _, k := range []string{"X-Secret", "Close", "Keep-Alive", "Keep-Alive-X", "X-Public", "Connection"} {
			if a, b := HopByHopResponseField(k, tc.conn), HopByHopResponseField(k, got); a != b {
				t.Errorf("HopByHopResponseField(%q) with Connection %q: %v, with ConnectionNames' %q: %v", k, tc.conn, a, got, b)
			}
		}
	}
}
