//go:build linux

package evloop

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenFD is a non-blocking listening socket on loopback and its address.
func listenFD(t *testing.T) (int, netip.AddrPort) {
	t.Helper()
	fd, err := ListenReusePort("127.0.0.1:0", 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	a, err := LocalAddr(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, a.AddrPort()
}

// waitWritable waits until fd is writable or hung up, and returns what
// poll(2) told.
func waitWritable(t *testing.T, fd int) int16 {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(p, 5000)
	if err != nil || n != 1 {
		t.Fatalf("poll: %d, %v", n, err)
	}
	return p[0].Revents
}

// TestAcceptDialSplice: Dial connects without blocking, Accept returns the
// peer's address as getpeername would, and Splice moves bytes socket ->
// pipe -> socket, reporting EAGAIN on an empty socket and 0 at its end.
func TestAcceptDialSplice(t *testing.T) {
	lfd, addr := listenFD(t)
	if _, _, err := Accept(lfd); err != unix.EAGAIN {
		t.Fatalf("Accept on an empty queue: %v, want EAGAIN", err)
	}
	cfd, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cfd)
	if ev := waitWritable(t, cfd); ev&unix.POLLOUT == 0 {
		t.Fatalf("dialed socket: revents %#x, want writable", ev)
	}
	if err := ConnectResult(cfd); err != nil {
		t.Fatalf("ConnectResult: %v", err)
	}
	var sfd int
	var peer netip.AddrPort
	deadline := time.Now().Add(5 * time.Second)
	for {
		sfd, peer, err = Accept(lfd)
		if err != unix.EAGAIN || time.Now().After(deadline) {
			break
		}
		unix.Poll([]unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}, 1000)
	}
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	defer unix.Close(sfd)
	local, err := LocalAddrPort(cfd)
	if err != nil {
		t.Fatal(err)
	}
	if peer != local {
		t.Fatalf("Accept's peer %v, want the dialer's local address %v", peer, local)
	}
	if fl, _ := unix.FcntlInt(uintptr(sfd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
		t.Fatal("the accepted socket is blocking, want non-blocking")
	}

	var ps Pipes
	p, err := ps.Get()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Splice(sfd, p.W, 1<<16); err != unix.EAGAIN {
		t.Fatalf("Splice from an empty socket: %v, want EAGAIN", err)
	}
	unix.Write(cfd, []byte("hello"))
	unix.Poll([]unix.PollFd{{Fd: int32(sfd), Events: unix.POLLIN}}, 5000)
	n, err := Splice(sfd, p.W, 1<<16)
	if err != nil || n != 5 {
		t.Fatalf("Splice socket -> pipe: %d, %v; want 5", n, err)
	}
	if n, err := Splice(p.R, sfd, n); err != nil || n != 5 {
		t.Fatalf("Splice pipe -> socket: %d, %v; want 5", n, err)
	}
	got := make([]byte, 5)
	unix.Poll([]unix.PollFd{{Fd: int32(cfd), Events: unix.POLLIN}}, 5000)
	if n, _ := unix.Read(cfd, got); string(got[:n]) != "hello" {
		t.Fatalf("echoed by splice: %q, want hello", got[:n])
	}
	unix.Shutdown(cfd, unix.SHUT_WR)
	unix.Poll([]unix.PollFd{{Fd: int32(sfd), Events: unix.POLLIN}}, 5000)
	if n, err := Splice(sfd, p.W, 1<<16); n != 0 || err != nil {
		t.Fatalf("Splice at the end of stream: %d, %v; want 0, nil", n, err)
	}
	ps.Put(p, true)
	if len(ps.Kept()) != 1 {
		t.Fatalf("an empty pipe put back: %d kept, want 1", len(ps.Kept()))
	}
	ps.Close()
}

// TestDialRefused: a refused connect shows as a hang-up, and
// ConnectResult says ECONNREFUSED.
func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	fd, err := Dial(addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return // refused at once: as good
		}
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if ev := waitWritable(t, fd); ev&(unix.POLLERR|unix.POLLHUP) == 0 {
		t.Fatalf("revents %#x, want a hang-up", ev)
	}
	if err := ConnectResult(fd); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("ConnectResult: %v, want ECONNREFUSED", err)
	}
}

// TestPipesNeverKeepBytes: a pipe put back with bytes in it is closed,
// never handed out again; an empty one is reused; no more than Max are
// kept.
func TestPipesNeverKeepBytes(t *testing.T) {
	ps := Pipes{Max: 1}
	defer ps.Close()
	full, err := ps.Get()
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(full.W, []byte("stale"))
	ps.Put(full, false)
	if len(ps.Kept()) != 0 {
		t.Fatal("a pipe with bytes was kept")
	}
	if _, err := unix.Write(full.W, []byte("x")); err == nil {
		t.Fatal("a pipe with bytes put back is still open, want it closed")
	}
	a, _ := ps.Get()
	b, _ := ps.Get()
	ps.Put(a, true)
	ps.Put(b, true) // over Max: closed
	if len(ps.Kept()) != 1 || ps.Kept()[0] != a {
		t.Fatalf("kept %v, want only %v (Max 1)", ps.Kept(), a)
	}
	again, _ := ps.Get()
	if again != a {
		t.Fatalf("Get returned %v, want the kept %v", again, a)
	}
	unix.Write(again.W, []byte("fresh"))
	got := make([]byte, 16)
	n, _ := unix.Read(again.R, got)
	if string(got[:n]) != "fresh" {
		t.Fatalf("a reused pipe read %q, want only its own bytes", got[:n])
	}
	again.Close()
}

// TestStaleEventOfAReusedNumberIsNotDelivered: when a handler closes a
// descriptor that has an event later in the same batch and its number is
// reused at once (a new pipe, as an accept or a dial would), the new
// file's handler is not called with the old file's event.
func TestStaleEventOfAReusedNumberIsNotDelivered(t *testing.T) {
	l := start(t)
	a, err := NewPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fresh, err := NewPipe() // empty: never readable
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	stale := make(chan Events, 1)
	done := make(chan struct{})
	onLoop(t, l, func() {
		// Both readable before the loop polls again: one batch.
		unix.Write(a.W, []byte("a"))
		unix.Write(b.W, []byte("b"))
		l.Add(a.R, Readable, handlerFunc(func(int, Events) {
			select {
			case <-done:
				return
			default:
			}
			close(done)
			// b's read end becomes the empty pipe's (dup3 closes the
			// old file and reuses its number at once, as an accept or
			// a dial would after a close).
			l.Forget(b.R)
			if err := unix.Dup3(fresh.R, b.R, unix.O_CLOEXEC); err != nil {
				t.Error(err)
				return
			}
			l.Add(b.R, Readable, handlerFunc(func(_ int, ev Events) {
				select {
				case stale <- ev:
				default: // level-triggered: the first one is what counts
				}
			}))
		}))
		// Registered ready, each goes on the ready list in turn: a's
		// event comes first in the batch, b's after it.
		l.Add(b.R, Readable, handlerFunc(func(int, Events) {}))
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the first handler did not run")
	}
	// The loop goes round twice more: a stale event would have been
	// delivered in the batch that held it.
	onLoop(t, l, func() {})
	onLoop(t, l, func() {})
	select {
	case ev := <-stale:
		t.Fatalf("the reused number's new handler was called with %#x, an event of the closed file (the new pipe is empty)", ev)
	default:
	}
	// Unwatched before the deferred closes: closing fresh's write end
	// is a real hang-up of the reused number, which is no concern here.
	onLoop(t, l, func() {
		l.Remove(a.R)
		l.Remove(b.R)
	})
}

// TestSocketGivesListenersUntilClosed: a Socket taken from a listener
// gives listeners on the same address that accept from its queue; once
// closed (twice is fine) it gives none.
func TestSocketGivesListenersUntilClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock, err := TakeSocket(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	back, err := sock.Listener()
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if back.Addr().String() != ln.Addr().String() {
		t.Fatalf("listener at %s, want %s", back.Addr(), ln.Addr())
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	back.SetDeadline(time.Now().Add(5 * time.Second))
	a, err := back.Accept()
	if err != nil {
		t.Fatalf("accept on the listener made from the socket: %v", err)
	}
	a.Close()
	sock.Close()
	sock.Close()
	if sock.FD() != -1 {
		t.Errorf("FD after Close = %d, want -1", sock.FD())
	}
	if l, err := sock.Listener(); err == nil {
		l.Close()
		t.Fatal("Listener after Close succeeded")
	}
}
