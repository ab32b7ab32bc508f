package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// TestShutdownLetsEstablishedConnectionFinish: after Shutdown the
// listener refuses new connections, an established one keeps working, and
// Shutdown returns nil once it ends.
func TestShutdownLetsEstablishedConnectionFinish(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	c := p.dial(t)
	roundTrip(t, c, "before")

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- p.l.Shutdown(ctx)
	}()
	testutil.WaitFor(t, 5*time.Second, "the listener to stop accepting", func() bool {
		nc, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			return true
		}
		nc.Close()
		return false
	})
	roundTrip(t, c, "during the drain")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a connection still open", err)
	default:
	}
	c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("closing: read %q, %v", rest, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown = %v, want nil: the connection finished on its own", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last connection ended")
	}
	if n := p.closed(CloseShutdown); n != 0 {
		t.Errorf("closed{shutdown} = %v, want 0", n)
	}
}

// TestShutdownCutsAtDeadline: a connection still open at the deadline is
// closed, and Shutdown says so.
func TestShutdownCutsAtDeadline(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	c := p.dial(t)
	roundTrip(t, c, "open")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.l.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 connection(s) cut") {
		t.Fatalf("Shutdown = %v, want 1 connection cut at the deadline", err)
	}
	if took := time.Since(start); took < 140*time.Millisecond {
		t.Errorf("Shutdown cut after %v, before its deadline", took)
	}
	expectClosed(t, c, 5*time.Second)
	if n := p.closed(CloseShutdown); n != 1 {
		t.Errorf("closed{shutdown} = %v, want 1", n)
	}
}

// TestShutdownClosesQueuedAndConnecting: connections waiting in the queue
// are closed at once; one stuck connecting is cut at the deadline.
func TestShutdownClosesQueuedAndConnecting(t *testing.T) {
	hole := blackhole(t)
	up := newUpstream(t, "app", rr(), hole)
	p := startProxy(t, Config{Name: "t", Upstream: "app", ConnectTimeout: time.Minute, MaxConns: 1, QueueSize: 1, QueueTimeout: time.Minute}, up)
	connecting := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the first connection to be admitted", func() bool { return p.l.Stats().Active == 1 })
	queued := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the second to be queued", func() bool { return p.l.Stats().Queued == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.l.Shutdown(ctx) }()
	if took := expectClosed(t, queued, 5*time.Second); took > 250*time.Millisecond {
		t.Errorf("queued connection closed after %v, want at once", took)
	}
	expectClosed(t, connecting, 5*time.Second)
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the connecting one cut at the deadline", err)
	}
	testutil.WaitFor(t, 5*time.Second, "rejected{shutdown} = 2", func() bool { return p.rejected(RejectShutdown) == 2 })
	if n := p.connectErrors("app", hole); n != 0 {
		t.Errorf("connect errors = %v, want 0: a dial cut by shutdown says nothing about the endpoint", n)
	}
}

// TestUpdateKeepsEstablishedConnections: new settings (another upstream, a
// short idle timeout) apply to new connections only.
func TestUpdateKeepsEstablishedConnections(t *testing.T) {
	a, b := startServer(t, named("a")), startServer(t, named("b"))
	ua, ub := newUpstream(t, "a", rr(), a.addr), newUpstream(t, "b", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "a"}, ua, ub)
	old := p.dial(t)
	if got := readLine(t, old); got != "a" {
		t.Fatalf("before Update: reached %q, want a", got)
	}
	if err := p.l.Update(Config{Name: "t", Upstream: "b", IdleTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	fresh := p.dial(t)
	if got := readLine(t, fresh); got != "b" {
		t.Fatalf("after Update: new connection reached %q, want b", got)
	}
	expectClosed(t, fresh, 5*time.Second) // the new idle timeout applies to it
	testutil.WaitFor(t, 5*time.Second, "closed{idle_timeout} = 1", func() bool { return p.closed(CloseIdle) == 1 })
	roundTrip(t, old, "old connection, old settings (no 50ms idle timeout)")
	if n := p.closed(CloseIdle); n != 1 {
		t.Errorf("closed{idle_timeout} = %v, want 1 (only the new connection)", n)
	}
}

func TestUpdateRejectsBadConfigAndKeepsOld(t *testing.T) {
	a := startServer(t, named("a"))
	p := startProxy(t, Config{Name: "t", Upstream: "a"}, newUpstream(t, "a", rr(), a.addr))
	if err := p.l.Update(Config{Name: "t", Upstream: "a", MaxConns: -1}); err == nil || !strings.Contains(err.Error(), "max_conns") {
		t.Fatalf("Update with max_conns -1: %v, want an error naming max_conns", err)
	}
	if err := p.l.Update(Config{Name: "renamed", Upstream: "a"}); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("Update renaming the listener: %v, want an error naming name", err)
	}
	if got := readLine(t, p.dial(t)); got != "a" {
		t.Fatalf("after rejected Updates: reached %q, want a", got)
	}
}

// TestWorkerServesNextConnection: the goroutine that served a connection
// waits for the next one instead of exiting, so sequential connections
// are served by one goroutine; Shutdown returns only once such idle
// goroutines have left. (The goroutine engine's: the event loop has no
// goroutine per connection.)
func TestWorkerServesNextConnection(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineGoroutine}, up)
	for i := range 3 {
		c := p.dial(t)
		roundTrip(t, c, fmt.Sprintf("connection %d", i))
		c.Close()
		testutil.WaitFor(t, 5*time.Second, "the connection to end", func() bool { return p.closed(CloseDone) == float64(i+1) })
		testutil.WaitFor(t, 5*time.Second, "its goroutine to wait for the next", func() bool { return p.l.idle.Load() >= 1 })
		if n := p.l.idle.Load(); n != 1 {
			t.Fatalf("after %d sequential connection(s): %d idle workers, want 1 (reused)", i+1, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.l.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := p.l.idle.Load(); n != 0 {
		t.Fatalf("Shutdown returned with %d idle workers still waiting, want 0", n)
	}
}
