package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rawEndpoint answers every request with answer, one request a connection.
func rawEndpoint(t *testing.T, answer string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.WriteString(c, answer)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestClientTellsAnOversizedHeadFromAMalformedOne: only a head that runs
// past MaxResponseHeaderBytes is ErrResponseHeaderTooLarge; a malformed
// head within it is not, even when the read that brought it (with body
// bytes behind it) used the whole allowance.
func TestClientTellsAnOversizedHeadFromAMalformedOne(t *testing.T) {
	c := NewClient(ClientConfig{MaxResponseHeaderBytes: 1024})
	defer c.Close()
	do := func(answer string) error {
		req, _ := http.NewRequest("GET", "http://a/", nil)
		resp, err := c.Do(context.Background(), time.Now().Add(5*time.Second), rawEndpoint(t, answer), Request{Req: req, URI: "/", Host: "a", Header: http.Header{}})
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 2048) + "\r\nContent-Length: 0\r\n\r\n"); !errors.Is(err, ErrResponseHeaderTooLarge) {
		t.Fatalf("a 2 KiB head under a 1 KiB cap: %v, want ErrResponseHeaderTooLarge", err)
	}
	err := do("HTTP/1.1 200 OK\r\nBad Line\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("b", 5000))
	if err == nil || errors.Is(err, ErrResponseHeaderTooLarge) {
		t.Fatalf("a short malformed head with a long body: %v, want a parse error", err)
	}
}

// TestClientStreamsABodyOfKnownLength: a request body with a
// Content-Length goes to the endpoint as it arrives, as a chunked one
// does. (It was held in the connection's write buffer, header and all,
// until 4 KiB had come: a slow upload reached the endpoint only at its
// end, over a connection the endpoint saw idle all along.)
func TestClientStreamsABodyOfKnownLength(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			first <- "bad request: " + err.Error()
			return
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(req.Body, buf); err != nil {
			first <- "reading the body: " + err.Error()
			return
		}
		first <- string(buf)
		rest, _ := io.ReadAll(req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(rest), rest)
	}()
	c := NewClient(ClientConfig{})
	defer c.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://a/up", nil)
		resp, err := c.Do(context.Background(), time.Now().Add(10*time.Second), l.Addr().String(),
			Request{Req: req, URI: "/up", Host: "a", Header: http.Header{}, Body: pr, Length: 10})
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{string(b), err}
	}()
	pw.Write([]byte("first"))
	select {
	case got := <-first:
		if got != "first" {
			t.Fatalf("the endpoint got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body's first bytes did not reach the endpoint before the rest of the body came")
	}
	pw.Write([]byte("later"))
	if r := <-done; r.err != nil || r.body != "later" {
		t.Fatalf("answer %q, %v; want the rest of the body, \"later\"", r.body, r.err)
	}
}

// TestClientTellsABrokenUpstreamFromABadBody: an endpoint that closes the
// connection while the request body is being sent fails the exchange with
// the write's error; only a failure to read the body is a *BodyError (the
// client's fault, which is not retried and answers 400).
func TestClientTellsABrokenUpstreamFromABadBody(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the head, then reset the connection with the body
			// still coming.
			http.ReadRequest(bufio.NewReader(c))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	c := NewClient(ClientConfig{})
	defer c.Close()
	post := func(body io.Reader, length int64) error {
		req, _ := http.NewRequest("POST", "http://a/up", nil)
		resp, err := c.Do(context.Background(), time.Now().Add(10*time.Second), l.Addr().String(),
			Request{Req: req, URI: "/up", Host: "a", Header: http.Header{}, Body: body, Length: length})
		if err == nil {
			resp.Body.Close()
			return errors.New("the exchange succeeded")
		}
		return err
	}
	// 32 MiB: more than loopback's socket buffers take, so the reset meets
	// a write of the body.
	const size = 32 << 20
	for _, length := range []int64{size, -1} {
		err := post(io.LimitReader(zeros{}, size), length)
		var be *BodyError
		if errors.As(err, &be) || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			t.Errorf("length %d: an endpoint that reset the connection during the body: %v; want a reset or broken pipe, not a *BodyError", length, err)
		}
	}
	// A body that cannot be read is the client's fault.
	broken := errors.New("client went quiet")
	err = post(io.MultiReader(strings.NewReader("part"), errReader{broken}), 100)
	if be := (*BodyError)(nil); !errors.As(err, &be) || !errors.Is(err, broken) {
		t.Errorf("a body that fails to read: %v; want a *BodyError", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestClientNeverLetsAHeaderValueEndItsLine: a CR or LF in a header value
// (whatever put it there) goes upstream as a space, as the server side
// writes them, so that it cannot start a header line of its own or end
// the head.
func TestClientNeverLetsAHeaderValueEndItsLine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seen := make(chan http.Header, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			seen <- http.Header{"Error": {err.Error()}}
			return
		}
		seen <- req.Header
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	}()
	c := NewClient(ClientConfig{})
	defer c.Close()
	req, _ := http.NewRequest("GET", "http://a/", nil)
	h := http.Header{"X-Subject": {"CN=bob\r\nX-Injected: 1"}, "X-Other": {"a\nb"}}
	resp, err := c.Do(context.Background(), time.Now().Add(5*time.Second), l.Addr().String(), Request{Req: req, URI: "/", Host: "a", Header: h})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := <-seen
	if got.Get("X-Subject") != "CN=bob  X-Injected: 1" || got.Get("X-Other") != "a b" || got.Get("X-Injected") != "" {
		t.Fatalf("the endpoint saw %v; want the values on their own lines, CR and LF as spaces", got)
	}
}
