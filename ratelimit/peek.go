package ratelimit

import (
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Peeking answers "would a request pass now?" without taking anything: an
// operator asking switchboard why a request was refused (GET
// /api/v1/explain) must not use up the quota the next real request needs.
// PeekN reports what ReserveN(now, n) would return, the call the proxy
// makes, and changes no count, no bucket and no queue. It is a question
// about one instant: a request arriving a moment later, or from another
// goroutine in between, may be decided differently.

// PeekN reports what ReserveN(now, n) would return, taking no token.
func (b *TokenBucket) PeekN(now time.Time, n int) Result {
	checkN(n)
	_, res := b.g.take(b.tat.Load(), clock.Nanos(now), n)
	return res
}

// PeekN reports what ReserveN(now, n) would return (with its Delay),
// queueing nothing.
func (b *LeakyBucket) PeekN(now time.Time, n int) Result {
	checkN(n)
	_, res := b.q.take(b.next.Load(), clock.Nanos(now), n, true)
	return res
}

// PeekN reports what ReserveN(key, now, n) would return, counting nothing
// and adding no key: a key not seen yet is answered as a new limiter would
// answer it.
func (k *Keyed) PeekN(key string, now time.Time, n int) Result {
	checkN(n)
	id := k.id(key)
	if k.buckets != nil {
		t := clock.Nanos(now)
		s := &k.buckets[id[0]&k.mask]
		s.mu.Lock()
		state := int64(fresh)
		if i, ok := s.find(id); ok {
			state = s.slots[i].v
		}
		s.mu.Unlock()
		var res Result
		if k.leaky {
			_, res = k.q.take(state, t, n, true)
		} else {
			_, res = k.g.take(state, t, n)
		}
		return res
	}
	s := &k.limiters[id[0]&k.mask]
	s.mu.Lock()
	var l limiter
	if i, ok := s.find(id); ok {
		l = s.slots[i].v
	}
	s.mu.Unlock()
	if l == nil {
		l = k.newLimiter()
	}
	return l.PeekN(now, n)
}

// ConcurrencyState is a concurrency limit's occupation at one instant.
type ConcurrencyState struct {
	InFlight    int `json:"in_flight"`
	MaxInFlight int `json:"max_in_flight"`
	Queued      int `json:"queued"`
	Queue       int `json:"queue"`
}

// Peek returns the limit's occupation, for explaining what Acquire would
// do now: take a slot (a slot free and nobody queued), wait (the queue has
// room) or refuse.
func (c *Concurrency) Peek() ConcurrencyState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConcurrencyState{InFlight: c.inFlight, MaxInFlight: c.max, Queued: c.waiters.Len(), Queue: c.queue}
}

// The window limiters keep their state behind a mutex: PeekN decides on a
// copy of it, with the very AllowN that counts, so that the two cannot
// drift apart and AllowN pays nothing for peeking.

// PeekN reports what AllowN(now, n) would return, counting nothing.
func (w *FixedWindow) PeekN(now time.Time, n int) Result {
	w.mu.Lock()
	c := FixedWindow{window: w.window, count: w.count, limit: w.limit, size: w.size}
	w.mu.Unlock()
	return c.AllowN(now, n)
}

// PeekN reports what AllowN(now, n) would return, counting nothing.
func (w *SlidingWindow) PeekN(now time.Time, n int) Result {
	w.mu.Lock()
	c := SlidingWindow{window: w.window, prev: w.prev, cur: w.cur, limit: w.limit, size: w.size}
	w.mu.Unlock()
	return c.AllowN(now, n)
}

// PeekN reports what AllowN(now, n) would return, counting nothing. It
// copies the log: up to 8 bytes per event in the window.
func (l *SlidingLog) PeekN(now time.Time, n int) Result {
	l.mu.Lock()
	c := SlidingLog{times: append([]int64(nil), l.times...), head: l.head, count: l.count, limit: l.limit, size: l.size}
	l.mu.Unlock()
	return c.AllowN(now, n)
}
