package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoSeen answers with what the handler saw of the request: method,
// target, Host and the body's length (or that reading it failed).
var echoSeen = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	body := strconv.FormatInt(n, 10)
	if err != nil {
		body = "body error"
	}
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, r.Method+" "+r.RequestURI+" "+r.Host+" "+body)
})

// oneShot sends raw on a fresh connection, half-closes it, and returns
// everything the server sent until it closed the connection.
func oneShot(addr string, raw []byte) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(raw)
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil && !isTimeout(err) {
		err = nil // a reset after the answer is a close like another
	}
	return string(b), err
}

// verdicts are the responses in what a server sent: each status and body.
func verdicts(s string) []string {
	var out []string
	br := bufio.NewReader(strings.NewReader(s))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			b = nil // error bodies are each server's own words
		}
		out = append(out, strconv.Itoa(resp.StatusCode)+" "+string(b))
	}
}

var fuzzServers struct {
	once      sync.Once
	ours, std string
}

// FuzzServerIsNeverMoreLenientThanNetHTTP feeds the same bytes to this
// engine's server and to net/http's, with the same handler echoing what
// it saw of each request. The engine may refuse what net/http accepts
// (it is stricter on purpose: Content-Length with Transfer-Encoding, say),
// but it must never accept what net/http refuses, and where both accept
// the first request they must have seen the same request: the same
// method, target, Host and body length. Those are the request-smuggling
// defences.
//
//	go test -run '^$' -fuzz=FuzzServerIsNeverMoreLenientThanNetHTTP -fuzztime=10m ./proxy/h1
func FuzzServerIsNeverMoreLenientThanNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	fuzzServers.once.Do(func() {
		for _, p := range []*string{&fuzzServers.ours, &fuzzServers.std} {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				f.Fatal(err)
			}
			*p = l.Addr().String()
			if p == &fuzzServers.ours {
				go (&Server{Handler: echoSeen, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}).Serve(l)
			} else {
				go (&http.Server{Handler: echoSeen, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}).Serve(l)
			}
		}
	})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 16<<10 {
			return
		}
		o, err := oneShot(fuzzServers.ours, raw)
		if err != nil {
			t.Fatalf("our server: %v (it must answer or close within 5s of a half-closed client)", err)
		}
		s, err := oneShot(fuzzServers.std, raw)
		if err != nil {
			return // net/http went quiet; nothing to hold ours to
		}
		ours, std := verdicts(o), verdicts(s)
		if len(ours) == 0 || len(std) == 0 {
			return // one of them closed without a word: no verdict to compare
		}
		oOK, sOK := ours[0][0] == '2', std[0][0] == '2'
		if oOK && !sOK {
			t.Fatalf("our server accepted what net/http refused:\n%q\nours: %q\nnet/http: %q", raw, ours, std)
		}
		if oOK && sOK && ours[0] != std[0] {
			t.Fatalf("both accepted but saw different requests:\n%q\nours: %q\nnet/http: %q", raw, ours[0], std[0])
		}
	})
}

// FuzzClientNeverReusesAConnectionWithLeftovers serves arbitrary bytes as
// an endpoint's first answer, then asks again. Whatever the first answer
// was (malformed, longer than it says, a second response glued on), the
// second request must get the endpoint's real second answer or an error,
// never bytes left over from the first: that would hand one client's
// response to another.
//
//	go test -run '^$' -fuzz=FuzzClientNeverReusesAConnectionWithLeftovers -fuzztime=10m ./proxy/h1
func FuzzClientNeverReusesAConnectionWithLeftovers(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 7\r\n\r\nokstale",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nstale",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, first []byte) {
		if len(first) > 16<<10 {
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for n := 0; ; n++ {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func(n int, c net.Conn) {
					defer c.Close()
					br := bufio.NewReader(c)
					for i := 0; ; i++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if n == 0 && i == 0 {
							c.Write(first)
							continue
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
					}
				}(n, c)
			}
		}()
		// Short timeouts: an answer the fuzzer left unfinished costs one
		// timeout; a slow second answer is an error, which the property
		// allows.
		cl := NewClient(ClientConfig{ConnectTimeout: time.Second, ResponseHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Minute, MaxIdlePerEndpoint: 4})
		defer cl.Close()
		get := func() (string, error) {
			r, _ := http.NewRequest("GET", "http://e/", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			resp, err := cl.Do(ctx, time.Now().Add(300*time.Millisecond), l.Addr().String(), Request{Req: r, URI: "/", Host: "e", Header: http.Header{}})
			if err != nil {
				return "", err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b), err
		}
		get() // the first answer is whatever the fuzzer made
		if body, err := get(); err == nil && body != "fresh" {
			t.Fatalf("after a first answer of %q the second request got %q, not the endpoint's second answer", first, body)
		}
	})
}
