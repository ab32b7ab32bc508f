//go:build linux

package evloop

import (
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Acceptor takes connections from a listening socket on one loop. Several
// loops share one socket, each with an Acceptor of its own: the socket is
// watched with EPOLLEXCLUSIVE, so that a new connection wakes one loop,
// not all (nginx's default since 1.11.3, accept_mutex off).
//
// With Batch 1, which the engines use when they run more than one loop, an
// Acceptor takes one connection per readiness event, as nginx does with
// multi_accept off: the listener stays ready (level triggered), so the
// loop takes the next one in its next iteration, and a loop that is busier
// iterates more slowly and so takes fewer. A larger batch lets the first
// loop woken by a burst (wrk opening 64 connections at once) take all of
// it while the other sits idle; measured on 2 loops, that left one loop
// with most connections in some runs and cost up to 15% of the requests a
// second (docs/BENCHMARKS.md, "Issue 15: a loop per CPU, ...").
//
// An accept that fails for want of a resource (EMFILE, ENFILE, ENOBUFS,
// ENOMEM) would fail again at once, the connection still queued and the
// socket still ready: the Acceptor then stops watching the socket for a
// while (5 ms, doubling up to 1 s while it keeps failing; a success starts
// over), so that a loop does not spin, and tells Failed. The connections
// wait in the accept queue meanwhile.
//
// Its methods run on the loop (Stop from a handler, a timer or Hand).
type Acceptor struct {
	// Take is given each connection accepted (non-blocking, close-on-exec)
	// with its peer's address; it owns the descriptor from then on.
	Take func(fd int, peer netip.AddrPort)
	// Failed, when set, is told of an accept that failed for want of a
	// resource, and of how long the Acceptor waits before it tries again.
	Failed func(err error, retry time.Duration)
	// Batch is how many connections one readiness event takes at most
	// (0: 1).
	Batch int

	l       *Loop
	fd      int
	stopped bool
	backoff time.Duration
	resume  Timer
}

// DefaultLoops is how many loops an engine runs when not told:
// GOMAXPROCS-1, at least 1. One processor is left to the rest of the
// process (the blocking steps, the goroutine engine, admin, metrics, the
// collector): a loop blocked in epoll_wait holds its processor until the
// scheduler's monitor takes it back, which starves goroutines when every
// processor has a loop (issue 15's note (d)). switchboard serve raises
// GOMAXPROCS by one for it, so that there is a loop per CPU (cli.Main).
func DefaultLoops() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// AcceptBatch is the Batch of an Acceptor on one of loops loops sharing
// a socket: 1 when there are several, so that a burst of connections is
// spread over them; 64 when one loop has the socket to itself.
func AcceptBatch(loops int) int {
	if loops > 1 {
		return 1
	}
	return 64
}

// acceptEvents is how a listening socket is watched.
const acceptEvents = Events(unix.EPOLLIN | unix.EPOLLEXCLUSIVE)

// Watch starts taking connections from lfd, a non-blocking listening
// socket that the caller keeps (and closes after Stop), on l.
func (a *Acceptor) Watch(l *Loop, lfd int) error {
	a.l, a.fd = l, lfd
	a.resume.Fire = a.retry
	return l.Add(lfd, acceptEvents, a)
}

// Stop stops taking connections (a retry waiting included). It must run
// on the loop (from a handler, a timer or Hand); the caller closes the
// socket after it.
func (a *Acceptor) Stop() {
	if a.stopped {
		return
	}
	a.stopped = true
	a.l.Disarm(&a.resume)
	if !a.resume.Armed() { // else it is not watched until the retry
		a.l.Remove(a.fd)
	}
}

// OnEvent takes up to Batch connections.
func (a *Acceptor) OnEvent(fd int, _ Events) {
	n := max(a.Batch, 1)
	for range n {
		if a.stopped {
			return
		}
		cfd, peer, err := Accept(fd)
		switch err {
		case nil:
			a.backoff = 0
			a.Take(cfd, peer)
			continue
		case unix.ECONNABORTED, unix.EPERM, unix.EPROTO:
			// That connection is gone (or a firewall refused it): the
			// next one may be fine.
			continue
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			a.wait(err)
		}
		// EAGAIN: another loop took it, or the queue is empty.
		return
	}
}

// wait stops watching the socket until the backoff has passed.
func (a *Acceptor) wait(err error) {
	a.backoff = min(max(2*a.backoff, 5*time.Millisecond), time.Second)
	a.l.Remove(a.fd)
	a.l.Arm(&a.resume, a.l.Now().Add(a.backoff))
	if a.Failed != nil {
		a.Failed(err, a.backoff)
	}
}

// retry watches the socket again after a backoff.
func (a *Acceptor) retry() {
	if a.stopped {
		return
	}
	if err := a.l.Add(a.fd, acceptEvents, a); err != nil {
		a.wait(err)
	}
}
