//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Events is a set of readiness events of a file descriptor.
type Events uint32

// The events a handler asks for (Add) and is told of.
const (
	Readable Events = unix.EPOLLIN | unix.EPOLLRDHUP
	Writable Events = unix.EPOLLOUT
	// Hangup: the peer closed or the connection failed (never asked for:
	// always told).
	Hangup Events = unix.EPOLLHUP | unix.EPOLLERR
	// PeerClosed (part of Readable): the peer closed its side. With
	// Edge it is told once, maybe with the last bytes: a handler must
	// then read on until the end (a read of 0), a short read included.
	PeerClosed Events = unix.EPOLLRDHUP
	// Urgent: TCP urgent data is pending. A read stops short at its mark
	// (a splice stops there for good), so a handler told of it must read
	// on, a short read included, as after PeerClosed.
	Urgent Events = unix.EPOLLPRI
	// Edge asks to be told of changes only (EPOLLET): a handler is called
	// when bytes come or room frees up, not again while they wait. It
	// must then read until a read comes back short (or EAGAIN), or
	// remember that it stopped early; in return it never changes what it
	// watches for (no epoll_ctl per exchange), which the HTTP engine
	// registers once per connection: Readable|Writable|Edge.
	Edge Events = unix.EPOLLET
)

// Handler is what a loop calls when a registered descriptor is ready. It
// runs on the loop and must not block: it reads and writes until EAGAIN
// and returns.
type Handler interface {
	OnEvent(fd int, ev Events)
}

// Loop is one event loop. Its methods other than Post, PostOr, Hand, Close
// and Done must be called on the loop itself (from a Handler, a Timer's
// Fire or a posted task), or before Run. Hand must not be called on the
// loop itself: it would wait for a task that only its own loop runs.
type Loop struct {
	epfd   int
	wakefd int // an eventfd: Post and Close write it to end a blocking wait
	events []unix.EpollEvent
	// handlers is indexed by descriptor: descriptors are small and dense,
	// so a slice beats a map on the path every event takes.
	handlers []Handler
	// addedIn is, by descriptor, the iteration whose events it was last
	// registered in (Add). An event of the batch being dispatched for a
	// descriptor registered during that same dispatch is stale: it was
	// the descriptor's number's previous file's (closed by a handler
	// earlier in the batch, the number reused at once by an accept or a
	// dial); the new file's own readiness is reported by the next poll.
	addedIn []uint64
	iter    uint64
	timers  timers
	// soon is what Soon asked to run once the handler, timer or task
	// running now returns; runSoon runs it.
	soon    []Runner
	runSoon func()
	now     time.Time // the loop's clock, read once per iteration

	mu       sync.Mutex
	tasks    []task // posted, not yet run
	running  []task // the batch being run (swapped with tasks)
	stopped  bool   // under mu: released; a task posted now never runs
	sleeping atomic.Bool
	closed   atomic.Bool
	done     chan struct{} // closed when Run has returned
	started  atomic.Bool
}

// New makes a loop; Run runs it.
func New() (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("evloop: eventfd: %w", err)
	}
	l := &Loop{epfd: epfd, wakefd: wakefd, events: make([]unix.EpollEvent, 256), done: make(chan struct{}), now: time.Now()}
	l.runSoon = l.drainSoon
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		l.release()
		return nil, fmt.Errorf("evloop: watching the eventfd: %w", err)
	}
	return l, nil
}

// Add registers fd, which must be non-blocking, for the events ev (level
// triggered: a handler that stops before EAGAIN is called again).
func (l *Loop) Add(fd int, ev Events, h Handler) error {
	e := unix.EpollEvent{Events: uint32(ev), Fd: int32(fd)}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &e); err != nil {
		return fmt.Errorf("evloop: watching fd %d: %w", fd, err)
	}
	for fd >= len(l.handlers) {
		l.handlers = append(l.handlers, nil)
		l.addedIn = append(l.addedIn, 0)
	}
	l.handlers[fd] = h
	l.addedIn[fd] = l.iter
	return nil
}

// Remove stops watching fd. Call it before closing fd: the descriptor's
// number may be reused at once by the next accept or dial.
func (l *Loop) Remove(fd int) error {
	if fd < len(l.handlers) {
		l.handlers[fd] = nil
	}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
		return fmt.Errorf("evloop: forgetting fd %d: %w", fd, err)
	}
	return nil
}

// Now is the loop's clock: read once per iteration, before the
// iteration's events, so that every timeout armed in one iteration counts
// from the same instant and reading the clock costs nothing per request.
func (l *Loop) Now() time.Time { return l.now }

// Arm (re)schedules t to fire at at.
func (l *Loop) Arm(t *Timer, at time.Time) { l.timers.arm(t, clock.Nanos(at)) }

// Disarm stops t; a disarmed t is left alone.
func (l *Loop) Disarm(t *Timer) { l.timers.disarm(t) }

// Runner is what Soon runs.
type Runner interface{ RunSoon() }

// Soon has r.RunSoon called on the loop as soon as the handler, timer or
// posted task running now has returned: after its stack has unwound, so
// that state it may still touch on its way out can be reused by r (a
// connection that finished an exchange deep in a handler serves its next
// request from RunSoon). Call it on the loop. It costs no allocation.
func (l *Loop) Soon(r Runner) { l.soon = append(l.soon, r) }

// drainSoon runs what Soon asked for, and what that asks for in turn.
func (l *Loop) drainSoon() {
	for i := 0; i < len(l.soon); i++ {
		r := l.soon[i]
		l.soon[i] = nil
		r.RunSoon()
	}
	l.soon = l.soon[:0]
}

// task is a posted function, and what runs instead if the loop stops
// before it (PostOr).
type task struct{ fn, lost func() }

// Post has fn run on the loop, after the events of the current iteration.
// It may be called from any goroutine; it wakes the loop if it is blocked.
// A task posted once the loop has stopped never runs (one posted after
// Close may still run, in the iteration under way).
func (l *Loop) Post(fn func()) { l.PostOr(fn, nil) }

// PostOr has fn run on the loop, as Post does, or lost instead if the loop
// stops without running it: on the goroutine that stops it, or at once on
// the caller's when it has stopped already. It does not wait. It is for
// bringing the loop something only fn would release (a descriptor): when
// the loop is gone, lost (if not nil) releases it.
func (l *Loop) PostOr(fn, lost func()) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		if lost != nil {
			lost()
		}
		return
	}
	l.tasks = append(l.tasks, task{fn, lost})
	l.mu.Unlock()
	// The loop sets sleeping before its last look at tasks (runTasks
	// under mu): either it sees fn there or we see it sleeping.
	if l.sleeping.Load() {
		l.wake()
	}
}

// Hand has fn run on the loop, as PostOr does, and waits until it has
// run, or until lost has run instead. It reports whether fn ran.
func (l *Loop) Hand(fn, lost func()) bool {
	ran := make(chan bool, 1)
	l.PostOr(func() {
		fn()
		ran <- true
	}, func() {
		lost()
		ran <- false
	})
	return <-ran
}

// wake ends a blocking wait of the loop. Under mu, so that it never
// writes to the eventfd's number after release closed it (it may belong to
// another file by then).
func (l *Loop) wake() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wakefd >= 0 {
		one := [8]byte{1}            // an addition to the eventfd's counter: any non-zero one wakes the loop
		unix.Write(l.wakefd, one[:]) // EAGAIN: the counter is full, a wake-up is pending anyway
	}
}

// Run runs the loop on the calling goroutine, locked to its thread, until
// Close. It returns nil after Close, or the error that stopped it.
func (l *Loop) Run() error {
	if !l.started.CompareAndSwap(false, true) {
		return errors.New("evloop: Run called twice")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(l.done)
	defer l.release()
	for !l.closed.Load() {
		n, err := l.poll()
		if err != nil {
			return err
		}
		l.iter++
		l.now = time.Now()
		for _, e := range l.events[:n] {
			fd := int(e.Fd)
			if fd == l.wakefd {
				var buf [8]byte
				unix.Read(l.wakefd, buf[:])
				continue
			}
			if fd < len(l.handlers) && l.handlers[fd] != nil && l.addedIn[fd] != l.iter {
				l.handlers[fd].OnEvent(fd, Events(e.Events))
				if len(l.soon) > 0 {
					l.drainSoon()
				}
			}
		}
		l.runTasks()
		l.timers.fire(clock.Nanos(l.now), l.runSoon)
	}
	return nil
}

// poll waits for events: without blocking first, and only then blocking
// until the next timer (see the package doc for why).
func (l *Loop) poll() (int, error) {
	if n, err := l.wait(0); n != 0 || err != nil {
		return n, err
	}
	timeout := -1
	if when, ok := l.timers.next(); ok {
		d := time.Duration(when - clock.Nanos(time.Now()))
		timeout = int((d + time.Millisecond - 1) / time.Millisecond) // rounded up: never wake early and spin
		if timeout < 0 {
			timeout = 0
		}
	}
	l.sleeping.Store(true)
	l.mu.Lock()
	pending := len(l.tasks) > 0
	l.mu.Unlock()
	if pending || l.closed.Load() {
		timeout = 0
	}
	n, err := l.wait(timeout)
	l.sleeping.Store(false)
	return n, err
}

func (l *Loop) wait(msec int) (int, error) {
	for {
		var n int
		var err error
		if msec == 0 {
			// A poll that does not wait: as Read, no need to tell the
			// runtime (epoll_pwait with no signal mask is epoll_wait on
			// every architecture, arm64 included, which has only the
			// former).
			r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd), uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
			if n = int(r); e != 0 {
				n, err = 0, errnoErr(e)
			}
		} else {
			n, err = unix.EpollWait(l.epfd, l.events, msec)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("evloop: epoll_wait: %w", err)
		}
		return n, nil
	}
}

// runTasks runs the tasks posted so far; those they post run next time.
func (l *Loop) runTasks() {
	l.mu.Lock()
	l.tasks, l.running = l.running[:0], l.tasks
	l.mu.Unlock()
	for i, t := range l.running {
		t.fn()
		l.running[i] = task{}
		if len(l.soon) > 0 {
			l.drainSoon()
		}
	}
}

// Close stops the loop: Run returns once its current iteration is over,
// and closes the loop's epoll and eventfd descriptors (not those of the
// connections registered with it, which are their owners'), and runs the
// lost of each task left (PostOr). It may be called from any goroutine,
// more than once, and does not wait: Done is closed once the loop has
// stopped. On a loop that never ran, it does all that at once.
func (l *Loop) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if !l.started.CompareAndSwap(false, true) {
		// Run is running: wake it and, from outside, wait for it.
		l.wake()
		return nil
	}
	// Run never ran and now never will. As in Run, release (the lost of
	// each task left) before Done.
	l.release()
	close(l.done)
	return nil
}

// Done is closed once the loop has stopped.
func (l *Loop) Done() <-chan struct{} { return l.done }

// release closes the loop's descriptors and runs the lost of each task
// left (PostOr): from here on none runs.
func (l *Loop) release() {
	l.mu.Lock()
	unix.Close(l.wakefd)
	unix.Close(l.epfd)
	l.wakefd, l.epfd = -1, -1
	l.stopped = true
	left := l.tasks
	l.tasks = nil
	l.mu.Unlock()
	for _, t := range left {
		if t.lost != nil {
			t.lost()
		}
	}
}
