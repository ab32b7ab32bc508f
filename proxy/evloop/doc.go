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
// Each iteration polls without blocking first, and blocks in epoll_wait
// (until the next timer) only when that finds nothing: issue 15's
// prototypes measured a loop that blocked at once losing 20-30% of its
// throughput, because a thread blocked in a system call lets the
// scheduler's monitor hand its processor away, and getting one back costs
// more than the wait saved. The prototypes also yielded the processor
// (runtime.Gosched) between the two polls; on this loop, locked to its
// thread, that cost more than it saved: a yielded goroutine locked to a
// thread goes to the global run queue, wakes an idle processor's thread
// (futex), and is handed back to its own thread. Measured with
// bench/run-http.sh (switchboard-loop against nginx, 2026-12-02, two
// rounds each): 12.3 and 11.2 µs of CPU per request with the yield, 9.9
// and 10.3 without; with 16 KiB responses, where the loop waits more
// often, 22.4 and 25.0 against 15.5 and 15.2. (gnet and evio block at
// once and rely on load to keep them busy; HAProxy's busy-polling option
// spins instead of sleeping.)
//
// Connections are registered once, for Readable|Writable|Edge: a loop
// is told when bytes come or room frees up, and a handler remembers
// whether it stopped before a socket was empty, so no epoll_ctl is spent
// per exchange; the non-blocking reads and writes go through RawSyscall
// (Read, Write), without the runtime's system-call bookkeeping. Soon runs
// work once the handler running now has returned (a connection serves
// its next request from there, after the stack of the last one has
// unwound, so that it can reuse its state).
//
// The HTTP engine (proxy/h1loop) has every loop accept from one listening
// socket, each loop watching it with EPOLLEXCLUSIVE so that a new
// connection wakes one loop, as nginx does by default since 1.11.3
// (accept_mutex off). ListenReusePort makes a socket per loop
// (SO_REUSEPORT) instead, which the kernel balances by a hash of the
// addresses; the engine does not use it, because a listener keeps one
// socket through hot reload and a switch of engine (closing one of a
// SO_REUSEPORT group resets the connections in its accept queue), and on
// these 2-core machines there is one loop (GOMAXPROCS-1) for it to
// balance.
//
// The TCP engine (proxy/tcpproxy) runs on loops too, and evloop has its
// pieces: Accept (accept4, the peer's address from its result), Dial and
// ConnectResult (a non-blocking connect), Splice and Pipes (bytes moved
// socket -> pipe -> socket, pipes pooled per loop and never reused with
// bytes in them), LocalAddrPort, and Forget (for a descriptor about to be
// closed: its close takes it out of epoll). Close, Shutdown and SockOpt
// are the other calls a loop makes per connection, through RawSyscall as
// Read and Write.
//
// Both engines take their listening socket with TakeSocket (a Socket:
// DupListener's descriptor, closed once) and close
// the *net.TCPListener they were given: the runtime's poller watches that
// one, and every connection that came woke one of the runtime's threads
// for nothing (tcp listeners: 2.6 context switches per connection, 1.55
// without). Socket.Listener (FileListener) makes a listener from the
// loops' descriptor when the goroutine engine takes the socket back. PostOr hands a loop work
// from another loop or goroutine without waiting, with what to do instead
// if the loop stops first (a connection moved to a lighter loop is closed
// then); Hand is PostOr and a wait. On systems other than Linux New
// reports ErrUnavailable.
package evloop

import "errors"

// ErrUnavailable is New's error where there is no event-loop engine (any
// system but Linux): the goroutine engine serves those listeners.
var ErrUnavailable = errors.New("evloop: the event-loop engine needs Linux (epoll)")
