//go:build linux

package evloop

import (
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// start runs a new loop until the test ends.
func start(t *testing.T) *Loop {
	t.Helper()
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- l.Run() }()
	t.Cleanup(func() {
		l.Close()
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after Close")
		}
	})
	return l
}

// onLoop runs fn on l and waits for it.
func onLoop(t *testing.T, l *Loop, fn func()) {
	t.Helper()
	done := make(chan struct{})
	l.Post(func() { fn(); close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a posted task did not run")
	}
}

func TestPostWakesABlockedLoop(t *testing.T) {
	l := start(t)
	// With no timer armed the loop ends up blocked in epoll_wait(-1):
	// only the eventfd can end that.
	testutil.WaitFor(t, 10*time.Second, "the loop to block", l.sleeping.Load)
	onLoop(t, l, func() {})
}

type handlerFunc func(fd int, ev Events)

func (f handlerFunc) OnEvent(fd int, ev Events) { f(fd, ev) }

func TestAReadableDescriptorCallsItsHandlerOnTheLoop(t *testing.T) {
	l := start(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got := make(chan string, 1)
	onLoop(t, l, func() {
		err = l.Add(fds[0], Readable, handlerFunc(func(fd int, ev Events) {
			var buf [16]byte
			n, _ := unix.Read(fd, buf[:])
			if ev&Readable != 0 && n > 0 {
				got <- string(buf[:n])
			}
		}))
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the loop to block", l.sleeping.Load)
	if _, err := unix.Write(fds[1], []byte("ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "ping" {
			t.Fatalf("the handler read %q, want ping", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called for a readable descriptor")
	}
	onLoop(t, l, func() { err = l.Remove(fds[0]) })
	if err != nil {
		t.Fatal(err)
	}
}

func TestTimersFireOnTheLoopNotBeforeTheirTime(t *testing.T) {
	l := start(t)
	type firing struct {
		name   string
		at, on time.Time
	}
	fired := make(chan firing, 3)
	var early, late, stopped Timer
	var at [2]time.Time
	early.Fire = func() { fired <- firing{"early", at[0], time.Now()} }
	late.Fire = func() { fired <- firing{"late", at[1], time.Now()} }
	stopped.Fire = func() { fired <- firing{name: "stopped"} }
	onLoop(t, l, func() {
		now := time.Now()
		at = [2]time.Time{now.Add(20 * time.Millisecond), now.Add(40 * time.Millisecond)}
		l.Arm(&late, at[1])
		l.Arm(&early, at[0])
		l.Arm(&stopped, now.Add(10*time.Millisecond))
		l.Disarm(&stopped)
	})
	for _, want := range []string{"early", "late"} {
		select {
		case f := <-fired:
			if f.name != want || f.on.Before(f.at) {
				t.Fatalf("%s fired at %v (due %v); want %s next, not before its time", f.name, f.on, f.at, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not fire", want)
		}
	}
	// A task runs after every timer due before it: the stopped one had
	// been due long before this.
	onLoop(t, l, func() {})
	select {
	case f := <-fired:
		t.Fatalf("%s fired after being disarmed", f.name)
	default:
	}
}

func TestListenersShareAPortWithReusePort(t *testing.T) {
	first, err := ListenReusePort("127.0.0.1:0", 128)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(first)
	addr, err := LocalAddr(first)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ListenReusePort(addr.String(), 128)
	if err != nil {
		t.Fatalf("a second listener on %s: %v", addr, err)
	}
	defer unix.Close(second)
	if ln, err := net.Listen("tcp", addr.String()); err == nil {
		ln.Close()
		t.Fatalf("a listener without SO_REUSEPORT bound %s too: the port is not reserved for the loops", addr)
	}

	// Each listener on a loop of its own; every connection is accepted
	// by one of them.
	var accepted atomic.Int32
	for _, fd := range []int{first, second} {
		l := start(t)
		onLoop(t, l, func() {
			err = l.Add(fd, Readable, handlerFunc(func(fd int, _ Events) {
				for {
					nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					if err != nil {
						return // EAGAIN: all taken
					}
					unix.Close(nfd)
					accepted.Add(1)
				}
			}))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	testutil.WaitFor(t, 10*time.Second, "every connection to be accepted", func() bool { return accepted.Load() == n })
}

func TestCloseBeforeRunReleasesTheLoop(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is open after Close of a loop that never ran")
	}
	if err := l.Run(); err == nil {
		t.Fatal("Run after Close returned nil, want an error")
	}
}

func TestHandoffMovesAConnectionToTheGoroutineEngineWithItsReadBytes(t *testing.T) {
	lfd, err := ListenReusePort("127.0.0.1:0", 16)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	addr, _ := LocalAddr(lfd)
	l := start(t)
	handed := make(chan net.Conn, 1)
	failed := make(chan error, 1)
	// The loop accepts, reads what has come ("hello ") and hands the
	// connection off with it.
	conn := handlerFunc(func(fd int, _ Events) {
		var buf [64]byte
		n, err := unix.Read(fd, buf[:])
		if err != nil || n == 0 {
			return
		}
		c, err := l.Handoff(fd, buf[:n])
		if err != nil {
			failed <- err
			return
		}
		handed <- c
	})
	onLoop(t, l, func() {
		err = l.Add(lfd, Readable, handlerFunc(func(fd int, _ Events) {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == nil {
				l.Add(nfd, Readable, conn)
			}
		}))
	})
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.Write([]byte("hello "))
	var c net.Conn
	select {
	case c = <-handed:
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not handed off")
	}
	defer c.Close()
	client.Write([]byte("world"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 0, 16)
	for len(got) < len("hello world") {
		var buf [16]byte
		n, err := c.Read(buf[:])
		if err != nil {
			t.Fatalf("reading the handed-off connection after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "hello world" {
		t.Fatalf("the handed-off connection read %q, want the loop's bytes then the socket's: %q", got, "hello world")
	}
	if _, err := c.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [2]byte
	if _, err := io.ReadFull(client, buf[:]); err != nil || string(buf[:]) != "ok" {
		t.Fatalf("the client read %q, %v; want ok", buf, err)
	}
}

type runnerFunc func()

func (f runnerFunc) RunSoon() { f() }

// TestSoonRunsAfterTheTaskReturns: what a task asks to run Soon runs on
// the loop once the task has returned, before the next task, and what
// that asks for runs too.
func TestSoonRunsAfterTheTaskReturns(t *testing.T) {
	l := start(t)
	var order []string
	onLoop(t, l, func() {
		l.Post(func() {
			l.Soon(runnerFunc(func() {
				order = append(order, "soon")
				l.Soon(runnerFunc(func() { order = append(order, "soon of soon") }))
			}))
			order = append(order, "task end")
		})
		l.Post(func() { order = append(order, "next task") })
	})
	onLoop(t, l, func() {})
	want := "task end,soon,soon of soon,next task"
	if got := strings.Join(order, ","); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// TestReadAndWriteAreNonBlockingSyscalls: Read and Write move bytes and
// report EAGAIN as unix.Read and unix.Write do.
func TestReadAndWriteAreNonBlockingSyscalls(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var buf [8]byte
	if _, err := Read(fds[0], buf[:]); err != unix.EAGAIN {
		t.Fatalf("Read of an empty socket: %v, want EAGAIN", err)
	}
	if n, err := Write(fds[1], []byte("hello")); n != 5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if n, err := Read(fds[0], buf[:]); n != 5 || err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	unix.Close(fds[1])
	if n, err := Read(fds[0], buf[:]); n != 0 || err != nil {
		t.Fatalf("Read after the peer closed: %d, %v, want 0, nil", n, err)
	}
	if _, err := Write(fds[0], []byte("x")); err != unix.EPIPE {
		t.Fatalf("Write to a closed peer: %v, want EPIPE", err)
	}
}

// TestWritevSendsBothSlicesInOrder: Writev takes a then b in one call, an
// empty one skipped, and reports what the socket took.
func TestWritevSendsBothSlicesInOrder(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	for _, tc := range []struct{ a, b string }{{"head ", "body"}, {"", "body"}, {"head", ""}} {
		n, err := Writev(fds[1], []byte(tc.a), []byte(tc.b))
		if err != nil || n != len(tc.a)+len(tc.b) {
			t.Fatalf("Writev(%q, %q): %d, %v", tc.a, tc.b, n, err)
		}
		var buf [16]byte
		m, _ := Read(fds[0], buf[:])
		if got := string(buf[:m]); got != tc.a+tc.b {
			t.Fatalf("read %q, want %q", got, tc.a+tc.b)
		}
	}
}

// TestDeadlineFiresOnceAtItsLatestTime: a deadline moved later fires at
// its last time, once; a cleared one does not fire; one moved earlier
// fires at the earlier time.
func TestDeadlineFiresOnceAtItsLatestTime(t *testing.T) {
	l := start(t)
	fired := make(chan time.Time, 4)
	var d Deadline
	d.Fire = func() { fired <- time.Now() }
	var set time.Time
	onLoop(t, l, func() {
		l.SetDeadline(&d, l.Now().Add(20*time.Millisecond))
		set = l.Now().Add(80 * time.Millisecond)
		l.SetDeadline(&d, set) // later: the armed timer fires first and re-arms
	})
	select {
	case at := <-fired:
		if at.Before(set) {
			t.Fatalf("fired %v before its deadline %v", at, set)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline did not fire")
	}
	// Cleared: nothing fires; moved earlier: it fires.
	var e Deadline
	e.Fire = func() { fired <- time.Time{} }
	onLoop(t, l, func() {
		l.SetDeadline(&e, l.Now().Add(10*time.Millisecond))
		l.SetDeadline(&e, time.Time{})
		l.SetDeadline(&d, l.Now().Add(time.Hour))
		l.SetDeadline(&d, l.Now().Add(30*time.Millisecond))
	})
	select {
	case at := <-fired:
		if at.IsZero() {
			t.Fatal("a cleared deadline fired")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline moved earlier did not fire")
	}
	// Both timers are off the heap once spent.
	onLoop(t, l, func() {})
	var left int
	onLoop(t, l, func() { left = len(l.timers.heap) })
	if left != 0 || len(fired) != 0 {
		t.Fatalf("%d timers armed, %d more fires; want none", left, len(fired))
	}
}

// TestHandoffClosesTheDescriptorWhenItFails: a Handoff that fails has
// closed fd, whether the loop could not stop watching it or the runtime
// could not take it (here: not a socket), so that its caller never closes
// it a second time (by then its number may be another file's).
func TestHandoffClosesTheDescriptorWhenItFails(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pipe := func() int {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(p[1]) })
		return p[0]
	}
	watched := pipe()
	if err := l.Add(watched, Readable, handlerFunc(func(int, Events) {})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fd   int
	}{{"not a socket", watched}, {"not watched", pipe()}} {
		if _, err := l.Handoff(c.fd, []byte("x")); err == nil {
			t.Fatalf("%s: Handoff succeeded", c.name)
		}
		if _, err := unix.FcntlInt(uintptr(c.fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("%s: after a failed Handoff the descriptor is %v, want closed (EBADF)", c.name, err)
		}
	}
}

// TestHandRunsLostWhenTheLoopStopsFirst: Hand runs its task on a running
// loop and reports it; once the loop has stopped, the task never runs and
// lost does, on the caller, so that what the task would have released (a
// dialed descriptor) is not left behind.
func TestHandRunsLostWhenTheLoopStopsFirst(t *testing.T) {
	l := start(t)
	var onLoop, lostCalled bool
	if !l.Hand(func() { onLoop = true }, func() { lostCalled = true }) || !onLoop || lostCalled {
		t.Fatalf("on a running loop: ran %v, lost %v; want the task run and lost not called", onLoop, lostCalled)
	}
	l.Close()
	<-l.Done()
	onLoop = false
	if l.Hand(func() { onLoop = true }, func() { lostCalled = true }) || onLoop || !lostCalled {
		t.Fatalf("on a stopped loop: ran %v, lost %v; want lost called instead of the task", onLoop, lostCalled)
	}
}

// TestPostOrRunsLostForEveryTaskTheLoopNeverRan: a task PostOr queued on
// a loop that stops before running it never runs, and its lost does
// (before Done is closed); once the loop has stopped, lost runs at once on
// the caller. A loop that runs the task does not call its lost.
func TestPostOrRunsLostForEveryTaskTheLoopNeverRan(t *testing.T) {
	var ran, lost atomic.Int32
	fn, gone := func() { ran.Add(1) }, func() { lost.Add(1) }

	// Queued on a loop that never runs.
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.PostOr(fn, gone)
	}
	l.Close()
	if ran.Load() != 0 || lost.Load() != 3 {
		t.Fatalf("closed before Run: %d ran, %d lost; want 0 and 3", ran.Load(), lost.Load())
	}
	l.PostOr(fn, gone)
	if ran.Load() != 0 || lost.Load() != 4 {
		t.Fatalf("posted after Close: %d ran, %d lost; want 0 and 4", ran.Load(), lost.Load())
	}

	// Queued behind a task that holds a running loop while it is closed.
	ran.Store(0)
	lost.Store(0)
	l = start(t)
	l.PostOr(fn, gone)
	testutil.WaitFor(t, 5*time.Second, "the first task to run", func() bool { return ran.Load() == 1 })
	hold, holding := make(chan struct{}), make(chan struct{})
	l.Post(func() {
		close(holding)
		<-hold
	})
	<-holding
	l.PostOr(fn, gone) // queued: the loop is inside the holding task
	l.Close()
	close(hold)
	<-l.Done()
	if ran.Load() != 1 || lost.Load() != 1 {
		t.Fatalf("closed while running: %d ran, %d lost; want 1 (the first) and 1 (the one queued at Close)", ran.Load(), lost.Load())
	}
}

// TestLostRunsBeforeDoneIsClosed: the lost of a task a loop never ran
// (PostOr) has run by the time Done is closed, whether the loop was
// closed while running or before Run: a goroutine that waits on Done may
// count on what lost releases being released.
func TestLostRunsBeforeDoneIsClosed(t *testing.T) {
	// lostSees is a lost that records whether Done was closed already.
	lostSees := func(l **Loop, doneFirst *atomic.Bool, lost *atomic.Int32) func() {
		return func() {
			select {
			case <-(*l).Done():
				doneFirst.Store(true)
			default:
			}
			lost.Add(1)
		}
	}

	t.Run("closed before Run", func(t *testing.T) {
		var doneFirst atomic.Bool
		var lost atomic.Int32
		l, err := New()
		if err != nil {
			t.Fatal(err)
		}
		l.PostOr(func() { t.Error("a task ran on a loop that never ran") }, lostSees(&l, &doneFirst, &lost))
		l.Close()
		<-l.Done()
		if lost.Load() != 1 || doneFirst.Load() {
			t.Fatalf("lost ran %d times, Done closed before it: %v; want once, before Done", lost.Load(), doneFirst.Load())
		}
	})

	t.Run("closed while running", func(t *testing.T) {
		var doneFirst atomic.Bool
		var lost atomic.Int32
		l := start(t)
		hold, holding := make(chan struct{}), make(chan struct{})
		l.Post(func() {
			close(holding)
			<-hold
		})
		<-holding
		l.PostOr(func() { t.Error("a task queued at Close ran") }, lostSees(&l, &doneFirst, &lost))
		l.Close()
		close(hold)
		<-l.Done()
		if lost.Load() != 1 || doneFirst.Load() {
			t.Fatalf("lost ran %d times, Done closed before it: %v; want once, before Done", lost.Load(), doneFirst.Load())
		}
	})
}
