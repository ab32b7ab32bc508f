//go:build linux

package h1loop_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
	"github.com/switchboard-dev/switchboard/proxy/h1loop"
	"github.com/switchboard-dev/switchboard/upstream"
)

// seenHeader answers with what the handler saw of the request, in the
// X-Seen field: method, target, Host and the body's length (or that
// reading it failed). The answer has no body, so that an answer to HEAD
// reads like any other.
var seenHeader = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	body := strconv.FormatInt(n, 10)
	if err != nil {
		body = "body error"
	}
	w.Header().Set("X-Seen", strconv.Quote(r.Method+" "+r.RequestURI+" "+r.Host+" "+body))
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
})

// sendRaw sends raw on a fresh connection to addr, half-closes it, and
// returns everything the server sent until it closed the connection.
func sendRaw(addr string, raw []byte) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(raw)
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		err = nil // a reset after the answer is a close like another
	}
	return string(b), err
}

// answers are the final responses in what a server sent (interim 1xx
// ones left out): each status, and for a success what the handler saw.
func answers(s string) []string {
	var out []string
	br := bufio.NewReader(strings.NewReader(s))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 {
			continue
		}
		a := strconv.Itoa(resp.StatusCode)
		if resp.StatusCode < 400 {
			a += " " + resp.Header.Get("X-Seen") // error answers are each server's own words
		}
		out = append(out, a)
	}
}

// startLoopFront serves the loop front end on loopback, as the proxy
// runs it: requests the loop serves go through a route to a backend that
// answers with seenHeader, the others are handed to proxy/h1's Server,
// which answers with seenHeader itself. It returns the front end's
// address; everything stops at f's end.
func startLoopFront(f *testing.F, st h1loop.Settings) string {
	be := httptest.NewServer(seenHeader)
	f.Cleanup(be.Close)
	u, err := upstream.New("be", upstream.Config{Targets: []endpoint.Spec{{Address: be.Listener.Addr().String()}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(u.Close)
	route, err := pipeline.New("r", pipeline.Config{Timeout: 5 * time.Second}, u, pipeline.HTTPTransport{})
	if err != nil {
		f.Fatal(err)
	}
	// The front's Handler and Exchange of server_linux_test.go; each
	// exchange's status, which its tests read, is drained here.
	fr := &front{up: h1loop.Upstream{MaxIdlePerEndpoint: 4}, statusC: make(chan int, 100)}
	fr.route.Store(route)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-fr.statusC:
			case <-stop:
				return
			}
		}
	}()
	f.Cleanup(func() { close(stop) })
	hs := &h1.Server{Handler: seenHeader, ReadHeaderTimeout: st.ReadHeaderTimeout, IdleTimeout: st.IdleTimeout, MaxHeaderBytes: st.MaxHeaderBytes}
	f.Cleanup(func() { hs.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv, err := h1loop.New(ln, fr, func(nc net.Conn) { go hs.ServeConn(nc) }, st, 1)
	if err != nil {
		ln.Close()
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	})
	return ln.Addr().String()
}

// FuzzLoopIsNeverMoreLenientThanNetHTTP is proxy/h1's
// FuzzServerIsNeverMoreLenientThanNetHTTP for the event-loop front end:
// the same bytes go to the loop (serving what it takes through a route to
// a backend, handing the rest to proxy/h1's Server) and to net/http's
// server, each answering with what it saw of each request. The loop may
// refuse what net/http accepts, never accept what net/http refuses, and
// where both accept a request they must have seen the same one: method,
// target, Host and body length. Pipelined requests are compared one by
// one while both accept them, so a loop that served a request and handed
// the rest of the bytes over is held to where net/http's next request
// began. Those are the request-smuggling defences.
//
//	go test -run '^$' -fuzz=FuzzLoopIsNeverMoreLenientThanNetHTTP -fuzztime=3m -parallel=1 ./proxy/h1loop
func FuzzLoopIsNeverMoreLenientThanNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a?b=c HTTP/1.1\r\nHost: a\r\n\r\nHEAD /b HTTP/1.1\r\nHost: a\r\n\r\nGET /c HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /next HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\nGET /lf HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
		"GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
		"PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc",
		"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	st := h1loop.Settings{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}
	loop := startLoopFront(f, st)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	std := &http.Server{Handler: seenHeader, ReadHeaderTimeout: st.ReadHeaderTimeout, IdleTimeout: st.IdleTimeout, MaxHeaderBytes: st.MaxHeaderBytes}
	go std.Serve(ln)
	f.Cleanup(func() { std.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 16<<10 {
			return
		}
		l, err := sendRaw(loop, raw)
		if err != nil {
			t.Fatalf("the loop: %v (it must answer or close within 5s of a half-closed client)", err)
		}
		s, err := sendRaw(ln.Addr().String(), raw)
		if err != nil {
			return // net/http went quiet; nothing to hold the loop to
		}
		ours, theirs := answers(l), answers(s)
		for i := 0; i < len(ours) && i < len(theirs); i++ {
			oOK, sOK := ours[i][0] == '2', theirs[i][0] == '2'
			if oOK && !sOK {
				t.Fatalf("request %d: the loop accepted what net/http refused:\n%q\nloop: %q\nnet/http: %q", i, raw, ours, theirs)
			}
			if !oOK || !sOK {
				return
			}
			if ours[i] != theirs[i] {
				t.Fatalf("request %d: both accepted but saw different requests:\n%q\nloop: %q\nnet/http: %q", i, raw, ours[i], theirs[i])
			}
		}
	})
}

// TestEmptyBodyResponseEndsTheExchange: a response of Content-Length 0
// has all arrived with its head; the exchange ends there and the
// connection serves the next request (FuzzLoopIsNeverMoreLenientThanNetHTTP
// found the loop waiting on the endpoint for a body byte that never came,
// the client's next request unanswered).
func TestEmptyBodyResponseEndsTheExchange(t *testing.T) {
	f := newFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusCreated)
	}), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	c, br := f.dial()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"+
		"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, method := range []string{"PUT", "GET"} {
		resp, body := readResponse(t, br, method)
		if resp.StatusCode != http.StatusCreated || resp.ContentLength != 0 || body != "" {
			t.Fatalf("%s: %d, length %d, %q; want 201 and an empty body", method, resp.StatusCode, resp.ContentLength, body)
		}
		// The call ended (Done) before the client could read the answer,
		// as with a body: a client that acts on an answer (its next
		// request, an explain of the route's breaker) finds the call's
		// outcome counted.
		select {
		case s := <-f.statusC:
			if s != http.StatusCreated {
				t.Fatalf("%s: Done with %d, want 201", method, s)
			}
		default:
			t.Fatalf("%s: the exchange had not ended when its answer with an empty body was read", method)
		}
	}
}
