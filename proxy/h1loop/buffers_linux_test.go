//go:build linux

package h1loop

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// plainHandler forwards every request over route.
type plainHandler struct{ route *pipeline.Route }

func (h plainHandler) Begin(r *http.Request, _ time.Time, _ Exchange) Exchange {
	x := &plainExchange{route: h.route}
	x.call.Req = r
	return x
}

type plainExchange struct {
	route *pipeline.Route
	call  pipeline.Call
}

func (x *plainExchange) Call() (*pipeline.Route, *pipeline.Call, Upstream) {
	return x.route, &x.call, Upstream{MaxIdlePerEndpoint: 4}
}
func (x *plainExchange) Respond(resp *http.Response) http.Header { return resp.Header }
func (x *plainExchange) Fail(err error) (int, http.Header, []byte) {
	return 502, http.Header{}, []byte(err.Error())
}
func (x *plainExchange) Done(status int, _, _ int64, err error, now time.Time) {
	x.call.FinishAt(status, err, now)
}

// plainServer is a Server of one loop with settings st, forwarding every
// request to a backend that answers "ok"; it returns the server, its
// address and the backend's. Everything is closed when the test ends.
func plainServer(t *testing.T, st Settings) (s *Server, addr, backend string) {
	t.Helper()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(be.Close)
	s, addr = plainServerTo(t, st, be.Listener.Addr().String())
	return s, addr, be.Listener.Addr().String()
}

// plainServerTo is plainServer forwarding to the backend at backend.
func plainServerTo(t *testing.T, st Settings, backend string) (s *Server, addr string) {
	t.Helper()
	u, err := upstream.New("be", upstream.Config{Targets: []endpoint.Spec{{Address: backend}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	route, err := pipeline.New("r", pipeline.Config{Timeout: 10 * time.Second}, u, pipeline.HTTPTransport{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err = New(ln, plainHandler{route}, func(nc net.Conn) { nc.Close() }, st, 1)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

// TestIdleConnectionsHoldNoReadBuffer: a keep-alive connection waiting
// for its next request has given its read buffer back to the loop, and
// the next request takes one from there (a loop with many idle clients
// holds one buffer per busy connection, not per connection).
func TestIdleConnectionsHoldNoReadBuffer(t *testing.T) {
	s, addr, _ := plainServer(t, Settings{})
	lp := s.loops[0]
	// state reads, on the loop, each client connection's read buffer
	// capacity and how many buffers the loop keeps.
	state := func() (caps []int, free int) {
		done := make(chan struct{})
		lp.l.Post(func() {
			for c := range lp.conns {
				caps = append(caps, cap(c.in))
			}
			free = len(lp.free.Kept())
			close(done)
		})
		<-done
		return caps, free
	}
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		conns = append(conns, c)
		br := bufio.NewReader(c)
		for j := 0; j < 2; j++ {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
				t.Fatalf("answer %q", b)
			}
		}
	}
	// Each connection is idle: a response's last bytes are written by a
	// handler, which serves the connection's next request (and gives the
	// buffer back) from Soon, right after it returns, before any task
	// posted meanwhile runs. So state sees every connection waiting.
	caps, free := state()
	if len(caps) != len(conns) {
		t.Fatalf("%d connections on the loop, want %d", len(caps), len(conns))
	}
	for _, n := range caps {
		if n != 0 {
			t.Fatalf("idle connections' read buffers: %v; want all given back", caps)
		}
	}
	if free != 1 {
		t.Fatalf("the loop keeps %d buffers, want 1: one at a time was in use", free)
	}
}

// TestDrainServesAConnectionWhoseFirstRequestIsOnItsWay: Shutdown closes
// idle keep-alive connections at once, but not one that has sent nothing
// yet (its request may be on its way, and a client does not retry a
// first request that got a reset): that one's request is answered, with
// Connection: close.
func TestDrainServesAConnectionWhoseFirstRequestIsOnItsWay(t *testing.T) {
	s, addr, _ := plainServer(t, Settings{ReadHeaderTimeout: 10 * time.Second})
	lp := s.loops[0]
	onLoop := func(fn func()) {
		done := make(chan struct{})
		lp.l.Post(func() { fn(); close(done) })
		<-done
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	used, usedR := dial()
	defer used.Close()
	io.WriteString(used, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(usedR, nil); err != nil {
		t.Fatal(err)
	} else {
		io.ReadAll(resp.Body)
	}
	fresh, freshR := dial()
	defer fresh.Close()
	// Both are the loop's before the drain starts: the fresh one waits
	// in the listener's queue once Dial returned, so the loop's next
	// poll, after the first task, accepts it before the second runs.
	onLoop(func() {})
	var n int
	onLoop(func() { n = len(lp.conns) })
	if n != 2 {
		t.Fatalf("%d connections on the loop, want 2", n)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	// The used idle connection is closed by the drain.
	if _, err := usedR.ReadByte(); err == nil {
		t.Fatal("the idle keep-alive connection got bytes, want it closed")
	}
	io.WriteString(fresh, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(freshR, nil)
	if err != nil {
		t.Fatalf("the connection whose first request came during the drain: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok" || !resp.Close {
		t.Fatalf("during the drain: %d %q, close %v; want 200 ok with Connection: close", resp.StatusCode, b, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestForgetClosesTheIdleConnectionsToAnAddress: the loops' idle
// connections to an endpoint that left its upstream are closed by Forget,
// those to other endpoints kept.
func TestForgetClosesTheIdleConnectionsToAnAddress(t *testing.T) {
	s, laddr, addr := plainServer(t, Settings{})
	lp := s.loops[0]
	idle := func(a string) (n int) {
		done := make(chan struct{})
		lp.l.Post(func() { n = len(lp.pool[a]); close(done) })
		<-done
		return n
	}
	c, err := net.Dial("tcp", laddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	if n := idle(addr); n != 1 {
		t.Fatalf("%d idle connections to the endpoint after a request, want 1", n)
	}
	s.Forget([]string{"127.0.0.1:1"})
	if n := idle(addr); n != 1 {
		t.Fatalf("forgetting another address left %d idle connections, want 1", n)
	}
	s.Forget([]string{addr})
	// Forget's task runs before the one idle posts after it.
	if n := idle(addr); n != 0 {
		t.Fatalf("%d idle connections to a forgotten endpoint, want 0", n)
	}
}

// TestClientThatStopsReadingTheLastBytesIsTimedOut: a response whose
// last bytes the client's socket cannot take waits for the client to read
// them for at most the idle timeout, as one whose relay paused does: a
// client that stops reading then cannot hold its connection (and the
// loop's memory of the answer) for ever. The client pipelines requests
// and reads nothing; the upstream writes each response in one write, so
// that each comes in one read and its relay ends with the write that
// finds the client full.
func TestClientThatStopsReadingTheLastBytesIsTimedOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 8192\r\n\r\n" + strings.Repeat("x", 8192))
	go func() {
		for {
			uc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer uc.Close()
				br := bufio.NewReader(uc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := uc.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	s, addr := plainServerTo(t, Settings{IdleTimeout: 200 * time.Millisecond}, ln.Addr().String())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	// More answers than the sockets' buffers hold (~16 MB).
	if _, err := io.WriteString(c, strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 2000)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.conns.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection of a client that stopped reading is still open; want it closed after the idle timeout")
		}
		time.Sleep(10 * time.Millisecond) // polling: the client, which must not read, sees no event of the close
	}
}

// TestUpstreamConnectionWhoseLastReadFilledTheBufferIsPooled: a response
// that ends exactly at the end of a full read buffer leaves the socket
// empty; its connection goes back to the pool (it was closed, as one that
// may hold bytes nobody asked for), and the next request uses it.
func TestUpstreamConnectionWhoseLastReadFilledTheBufferIsPooled(t *testing.T) {
	const total = 2 * readChunk // an upstream connection's read buffer
	head := "HTTP/1.1 200 OK\r\nContent-Length: 32726\r\n\r\n"
	resp := append([]byte(head), bytes.Repeat([]byte("x"), total-len(head))...)
	if len(head)+32726 != total {
		t.Fatalf("response of %d bytes, want %d", len(head)+32726, total)
	}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					c.Write(resp)
				}
			}()
		}
	}()
	_, addr := plainServerTo(t, Settings{}, bl.Addr().String())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 3; i++ {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, r.Body); n != 32726 {
			t.Fatalf("request %d: %d body bytes, want 32726", i, n)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("the backend accepted %d connections for 3 requests, want 1: the pooled one reused", n)
	}
}
