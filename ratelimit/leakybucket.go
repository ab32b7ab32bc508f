package ratelimit

import (
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// LeakyBucket is a leaky bucket used as a queue: it releases events at a
// strictly even pace, one every Rate.Interval(), and holds up to queue
// events waiting for their turn. ReserveN gives each admitted arrival its
// own departure slot and returns the Delay until it; an arrival is rejected
// when the queue is full or when its Delay would exceed maxWait. Like
// TokenBucket its state is one atomic time (the next free departure slot)
// updated with compare-and-swap.
//
// Create one with NewLeakyBucket or New; the zero value is not usable.
type LeakyBucket struct {
	next atomic.Int64 // nanos of the next free departure slot
	q    leaky
}

// leaky is a leaky bucket's parameters and its step function, shared by
// LeakyBucket and Keyed.
type leaky struct {
	interval int64 // nanoseconds between departures
	depth    int64 // queue*interval: the last admitted slot's furthest distance from now
	maxWait  int64 // 0: bounded by the queue only
	queue    int
}

// NewLeakyBucket returns a leaky bucket that releases events at r and lets
// up to queue events wait, none longer than maxWait (0: as long as the
// queue implies, queue*r.Interval()). It panics if r is invalid, queue is
// below 1 or maxWait is negative; Config.Validate reports those as errors.
func NewLeakyBucket(r Rate, queue int, maxWait time.Duration) *LeakyBucket {
	if err := checkLeakyBucket(r, queue, maxWait); err != nil {
		panic(err)
	}
	b := &LeakyBucket{q: newLeaky(r, queue, maxWait)}
	b.next.Store(fresh)
	return b
}

func newLeaky(r Rate, queue int, maxWait time.Duration) leaky {
	interval := int64(r.Interval())
	return leaky{interval: interval, depth: int64(queue) * interval, maxWait: int64(maxWait), queue: queue}
}

func checkLeakyBucket(r Rate, queue int, maxWait time.Duration) error {
	if err := r.valid(); err != nil {
		return err
	}
	if queue < 1 {
		return field.Errorf("queue", "must be at least 1, got %d", queue)
	}
	if int64(queue) >= int64(maxDuration)/int64(r.Interval()) {
		return field.Errorf("queue", "%d at %v is more than 290 years of waiting", queue, r)
	}
	if maxWait < 0 {
		return field.Errorf("max_wait", "must not be negative, got %v", maxWait)
	}
	return nil
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (b *LeakyBucket) Allow() bool { return b.AllowN(time.Now(), 1).Allowed }

// AllowN admits n events only if they can leave at now, without waiting:
// nothing is queued ahead of them. A rejection's RetryAfter is the time
// until the queue ahead has drained. It panics if n is negative.
func (b *LeakyBucket) AllowN(now time.Time, n int) Result { return b.take(now, n, false) }

// ReserveN admits n events into the queue: the first leaves after the
// returned Delay, and the next arrival's slot is n intervals later. It
// rejects them when the last of the n would be more than queue intervals
// away or the Delay would exceed maxWait. It panics if n is negative.
func (b *LeakyBucket) ReserveN(now time.Time, n int) Result { return b.take(now, n, true) }

func (b *LeakyBucket) take(now time.Time, n int, wait bool) Result {
	checkN(n)
	t := clock.Nanos(now)
	for {
		next := b.next.Load()
		end, res := b.q.take(next, t, n, wait)
		if end == next || b.next.CompareAndSwap(next, end) {
			return res
		}
	}
}

// take decides n events at t (nanos) for a bucket whose next free slot is
// next, returning the new next slot (next itself when nothing changes) and
// the Result. With wait false only an immediate departure is admitted.
func (q *leaky) take(next, t int64, n int, wait bool) (int64, Result) {
	start := max(next, t)
	if n > q.queue+1 {
		return next, q.result(t, start, false, InfDuration)
	}
	if n == 0 {
		return next, q.result(t, start, true, 0)
	}
	delay := start - t
	// The last of the n events leaves (n-1) intervals after the first.
	over := delay + int64(n-1)*q.interval - q.depth
	if q.maxWait > 0 {
		over = max(over, delay-q.maxWait)
	}
	if !wait {
		over = max(over, delay)
	}
	if over > 0 {
		return next, q.result(t, start, false, time.Duration(over))
	}
	end := start + int64(n)*q.interval
	res := q.result(t, end, true, 0)
	res.Delay = time.Duration(delay)
	return end, res
}

// result describes the bucket whose next free slot is at slot (nanos).
func (q *leaky) result(t, slot int64, allowed bool, retry time.Duration) Result {
	ahead := slot - t // the delay the next single arrival would get
	room := q.depth - ahead
	if q.maxWait > 0 {
		room = min(room, q.maxWait-ahead)
	}
	remaining := 0
	if room >= 0 {
		remaining = int(room/q.interval) + 1
	}
	return Result{
		Allowed:    allowed,
		Limit:      q.queue + 1,
		Remaining:  remaining,
		ResetAfter: time.Duration(ahead),
		RetryAfter: retry,
	}
}

// idle: once the last slot has passed, the queue is empty.
func (b *LeakyBucket) idle(now time.Time) bool { return b.next.Load() <= clock.Nanos(now) }
