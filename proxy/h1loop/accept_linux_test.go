//go:build linux

package h1loop_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/proxy/h1loop"
)

// TestAcceptOutOfDescriptorsBacksOff: an accept that fails for want of a
// descriptor stops the loop watching the socket for a doubling backoff
// (5 ms, 10 ms, ...), reported to Settings.AcceptFailed, instead of
// spinning on a socket that stays ready; the connection waits in the
// accept queue and is served once descriptors are free again. Not
// parallel: it takes the process's descriptors.
func TestAcceptOutOfDescriptorsBacksOff(t *testing.T) {
	type report struct {
		err   error
		retry time.Duration
	}
	reports := make(chan report, 64)
	st := h1loop.Settings{AcceptFailed: func(err error, retry time.Duration) {
		select {
		case reports <- report{err, retry}:
		default:
		}
	}}
	f := newFront(t, http.HandlerFunc(echoPath), st, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	// The first request opens the backend's and the upstream's
	// descriptors, so that the one below needs only its accept.
	warm, wbr := f.dial()
	fmt.Fprintf(warm, "GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readResponse(t, wbr, "GET"); resp.StatusCode != 200 || body != "path=/warm" {
		t.Fatalf("warm-up: %d %q", resp.StatusCode, body)
	}

	// One descriptor left: the client's; the loop's accept finds none.
	giveBack := testutil.TakeDescriptors(t)
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial with one descriptor left: %v", err)
	}
	defer c.Close()

	// Two loops, each with its own backoff: 5, 10, 20, 40 ms each. A
	// loop that spun on the ready socket would report far more failures
	// (or none, and never serve the connection) before its 40 ms step.
	var got []time.Duration
	var first time.Time
	for len(got) == 0 || got[len(got)-1] < 40*time.Millisecond {
		select {
		case r := <-reports:
			if r.err != unix.EMFILE {
				t.Fatalf("accept failure reported as %v, want EMFILE", r.err)
			}
			if got = append(got, r.retry); len(got) == 1 {
				first = time.Now()
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after %v: no further accept failure reported", got)
		}
		if len(got) > 8 {
			t.Fatalf("retry steps %v: more failures than two loops' backoffs from 5 ms to 40 ms make", got)
		}
	}
	// Its 40 ms step comes after its 5, 10 and 20 ms waits (less a
	// little: the loop's clock is read once per iteration).
	if waited := time.Since(first); waited < 25*time.Millisecond {
		t.Fatalf("retry steps %v: the 40 ms step came %v after the first failure: the loop did not wait", got, waited)
	}
	for _, d := range got {
		switch d {
		case 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond:
		default:
			t.Fatalf("retry steps %v: %v is no step of a backoff doubling from 5 ms", got, d)
		}
	}

	giveBack()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "path=/after" {
		t.Fatalf("after the backoff: %d %q", resp.StatusCode, body)
	}
}

// TestBurstOfConnectionsIsSpreadOverTheLoops: connections that arrive at
// once, whichever loop the kernel wakes for them, end up on the loops
// within one of each other (a loop with two more than another hands its
// next ones over), and each is served.
func TestBurstOfConnectionsIsSpreadOverTheLoops(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	const n = 40
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	var last []int
	testutil.WaitFor(t, 10*time.Second, "every connection to be on a loop", func() bool {
		last = f.srv.LoopConns()
		sum := 0
		for _, k := range last {
			sum += k
		}
		return sum == n
	})
	lo, hi := last[0], last[0]
	for _, k := range last {
		lo, hi = min(lo, k), max(hi, k)
	}
	if hi-lo > 2 {
		t.Fatalf("connections per loop %v: not spread (at most two apart)", last)
	}
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /c/%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if resp, body := readResponse(t, bufio.NewReader(c), "GET"); resp.StatusCode != 200 || body != fmt.Sprintf("path=/c/%d", i) {
			t.Fatalf("connection %d: %d %q", i, resp.StatusCode, body)
		}
	}
}

// TestNewTakesTheSocketAndListenerHandsItBack: New closes the listener it
// is given (the runtime's poller watched it, and each new connection woke
// one of the runtime's threads for nothing) and the loops serve the
// socket from a descriptor of their own; Listener gives a listener on the
// same socket back, which takes the connections that come once the loops
// have stopped accepting, and there is none to give after that.
func TestNewTakesTheSocketAndListenerHandsItBack(t *testing.T) {
	f := newFront(t, http.HandlerFunc(echoPath), h1loop.Settings{}, h1loop.Upstream{MaxIdlePerEndpoint: 4})
	given := f.ln.(*net.TCPListener)
	given.SetDeadline(time.Now()) // an Accept on a listener left open times out at once
	if c, err := given.Accept(); !errors.Is(err, net.ErrClosed) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Accept on the listener given to New: %v; want net.ErrClosed (New closes it)", err)
	}
	c, br := f.dial()
	fmt.Fprintf(c, "GET /on-the-loops HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "path=/on-the-loops" {
		t.Fatalf("on the loops: %d %q", resp.StatusCode, body)
	}
	if n := f.served.Load(); n != 1 {
		t.Fatalf("the loops served %d requests, want 1", n)
	}

	back, err := f.srv.Listener()
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if got := back.Addr().String(); got != f.addr {
		t.Fatalf("Listener is on %s, want %s", got, f.addr)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if ln, err := f.srv.Listener(); err == nil {
		ln.Close()
		t.Fatal("Listener after Shutdown returned a listener; want an error (the loops' descriptor is closed)")
	}

	// The loops' descriptor is closed; the socket lives on in back.
	nc, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial once the loops stopped: %v", err)
	}
	defer nc.Close()
	back.SetDeadline(time.Now().Add(10 * time.Second))
	ac, err := back.Accept()
	if err != nil {
		t.Fatalf("Accept on Listener's listener once the loops stopped: %v", err)
	}
	defer ac.Close()
	if ac.RemoteAddr().String() != nc.LocalAddr().String() {
		t.Fatalf("Listener's listener accepted %s, want the connection from %s", ac.RemoteAddr(), nc.LocalAddr())
	}
}
