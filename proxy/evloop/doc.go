// Package evloop runs network connections on per-core event loops: the
// foundation of the event-loop HTTP/1.1 engine of issue 15.
//
// A Loop owns an epoll instance, the connections registered with it, a
// clock read once per iteration and a heap of timers; it runs on one
// goroutine locked to its OS thread. Everything a connection does happens
// on its loop, so a connection's state needs no lock; other goroutines
// hand work to a loop with Post (a blocking pipeline step's result, say),
// which wakes it through an eventfd.
//
// Each iteration polls without blocking first, then yields the processor
// (runtime.Gosched) and polls again, and only then blocks in epoll_wait
// until the next timer: issue 15's prototypes measured a loop that blocked
// at once losing 20-30% of its throughput, because a thread blocked in a
// system call lets the scheduler's monitor hand its processor away, and
// getting one back costs more than the wait saved. (gnet and evio block at
// once and rely on load to keep them busy; HAProxy's busy-polling option
// spins instead of sleeping. Poll, yield, block sits between the two.)
//
// Listeners are one per loop on a shared port (SO_REUSEPORT, ListenReusePort):
// the kernel spreads new connections over the loops, and a connection and
// the upstream connections of its exchanges stay on the loop that
// accepted it, as in nginx's workers.
//
// Status: the loop, its timers and task hand-off, and the listeners. The
// HTTP/1.1 front end on top of them (heads parsed with proxy/h1's parsers,
// pipeline steps driven with pipeline.Route.Begin) is not written yet; on
// systems other than Linux New reports ErrUnavailable.
package evloop

import "errors"

// ErrUnavailable is New's error where there is no event-loop engine (any
// system but Linux): the goroutine engine serves those listeners.
var ErrUnavailable = errors.New("evloop: the event-loop engine needs Linux (epoll)")
