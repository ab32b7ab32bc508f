package ratelimit

import (
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// TokenBucket is a token bucket of Burst tokens refilled at Rate,
// implemented as GCRA: its whole state is one atomic "theoretical arrival
// time" (tat), the instant at which the bucket will be full again. Taking
// n tokens at now moves tat to max(tat, now) + n*interval, which is allowed
// while tat stays within burst*interval of now. A compare-and-swap loop
// makes AllowN lock-free, and since every admitted event advances tat by
// exactly one interval, concurrent callers can never admit more than
// burst + rate*elapsed between them.
//
// Create one with NewTokenBucket or New; the zero value is not usable.
type TokenBucket struct {
	tat atomic.Int64 // nanos of the instant the bucket is full again
	g   gcra
}

// gcra is a token bucket's parameters and its step function, shared by
// TokenBucket (state in an atomic) and Keyed (state in a table slot).
type gcra struct {
	interval int64 // nanoseconds per token
	capacity int64 // burst*interval: how far tat may run ahead of now
	burst    int
}

// NewTokenBucket returns a token bucket that holds burst tokens and refills
// at r, starting full. It panics if r is invalid or burst is below 1, or if
// burst*r.Interval() does not fit in a time.Duration; Config.Validate
// reports those as errors.
func NewTokenBucket(r Rate, burst int) *TokenBucket {
	if err := checkTokenBucket(r, burst); err != nil {
		panic(err)
	}
	b := &TokenBucket{g: newGCRA(r, burst)}
	b.tat.Store(fresh)
	return b
}

func newGCRA(r Rate, burst int) gcra {
	interval := int64(r.Interval())
	return gcra{interval: interval, capacity: int64(burst) * interval, burst: burst}
}

func checkTokenBucket(r Rate, burst int) error {
	if err := r.valid(); err != nil {
		return err
	}
	if burst < 1 {
		return field.Errorf("burst", "must be at least 1, got %d", burst)
	}
	if int64(burst) > int64(maxDuration)/int64(r.Interval()) {
		return field.Errorf("burst", "%d at %v is more than 290 years of tokens", burst, r)
	}
	return nil
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (b *TokenBucket) Allow() bool { return b.AllowN(time.Now(), 1).Allowed }

// AllowN takes n tokens at now if the bucket holds them. n = 0 only
// reports the state. It panics if n is negative.
func (b *TokenBucket) AllowN(now time.Time, n int) Result {
	checkN(n)
	t := clock.Nanos(now)
	g := &b.g
	for {
		// gcra.take, written out: this is the hot path.
		tat := b.tat.Load()
		next := max(tat, t) + int64(n)*g.interval
		if n > g.burst || next-t > g.capacity || n == 0 {
			return g.other(tat, t, n)
		}
		if b.tat.CompareAndSwap(tat, next) {
			return Result{
				Allowed:    true,
				Limit:      g.burst,
				Remaining:  int((g.capacity - (next - t)) / g.interval),
				ResetAfter: time.Duration(next - t),
			}
		}
	}
}

// take decides n tokens at t (nanos) for a bucket in state tat, returning
// the new state (tat itself when nothing changes) and the Result. The
// common case, admitting n >= 1 tokens, is kept small enough to inline.
func (g *gcra) take(tat, t int64, n int) (int64, Result) {
	next := max(tat, t) + int64(n)*g.interval // overflows only if n > burst
	if n > g.burst || next-t > g.capacity || n == 0 {
		return tat, g.other(tat, t, n)
	}
	return next, Result{
		Allowed:    true,
		Limit:      g.burst,
		Remaining:  int((g.capacity - (next - t)) / g.interval),
		ResetAfter: time.Duration(next - t),
	}
}

// other is take's Result when it changes nothing: a rejection, or n = 0.
func (g *gcra) other(tat, t int64, n int) Result {
	base := max(tat, t)
	res := Result{
		Limit:      g.burst,
		Remaining:  int((g.capacity - (base - t)) / g.interval),
		ResetAfter: time.Duration(base - t),
	}
	switch {
	case n == 0:
		res.Allowed = true
	case n > g.burst:
		res.RetryAfter = InfDuration
	default:
		res.RetryAfter = time.Duration(base + int64(n)*g.interval - t - g.capacity)
	}
	return res
}

// ReserveN is AllowN: a token bucket rejects rather than delays. Wait is
// the way to wait for tokens.
func (b *TokenBucket) ReserveN(now time.Time, n int) Result { return b.AllowN(now, n) }

// reserveN takes n tokens at now if they are due within maxWait: in GCRA
// terms, tat may run up to maxWait past the bucket's capacity, and the
// Result's Delay is how far it does. It returns the Result and, when
// admitted, the tat it set, for cancel. A rejection changes nothing; its
// RetryAfter is the wait the n tokens would need (InfDuration for n >
// burst).
func (b *TokenBucket) reserveN(now time.Time, n int, maxWait time.Duration) (Result, int64) {
	checkN(n)
	t := clock.Nanos(now)
	g := &b.g
	for {
		tat := b.tat.Load()
		if n > g.burst || n == 0 {
			return g.other(tat, t, n), tat
		}
		next := max(tat, t) + int64(n)*g.interval
		delay := max(next-t-g.capacity, 0)
		if delay > int64(maxWait) {
			return g.other(tat, t, n), tat
		}
		if b.tat.CompareAndSwap(tat, next) {
			return Result{
				Allowed:    true,
				Limit:      g.burst,
				Remaining:  int(max(g.capacity-(next-t), 0) / g.interval),
				ResetAfter: time.Duration(next - t),
				Delay:      time.Duration(delay),
			}, next
		}
	}
}

// cancel gives back, at now, the n tokens a reserveN that set tat to end
// took, unless they are already due. As with x/time/rate's
// Reservation.Cancel, tokens that reservations made after it have been
// counted on stay taken: the give-back is n intervals less however far tat
// has moved past end since, so no later waiter's turn moves and the bucket
// never admits more than its rate.
func (b *TokenBucket) cancel(now time.Time, end int64, n int) {
	t := clock.Nanos(now)
	g := &b.g
	if end-g.capacity <= t { // the tokens were due: the caller had them
		return
	}
	for {
		tat := b.tat.Load()
		back := int64(n)*g.interval - max(tat-end, 0)
		if back <= 0 || b.tat.CompareAndSwap(tat, tat-back) {
			return
		}
	}
}

// idle: once tat has passed, the bucket is full, like a new one.
func (b *TokenBucket) idle(now time.Time) bool { return b.tat.Load() <= clock.Nanos(now) }
