package ratelimit

import (
	"fmt"
	"sync/atomic"
	"time"
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
	tat      atomic.Int64 // nanos of the instant the bucket is full again
	interval int64        // nanoseconds per token
	capacity int64        // burst*interval: how far tat may run ahead of now
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
	b := &TokenBucket{interval: int64(r.Interval()), burst: burst}
	b.capacity = int64(burst) * b.interval
	b.tat.Store(fresh)
	return b
}

func checkTokenBucket(r Rate, burst int) error {
	if err := r.valid(); err != nil {
		return err
	}
	if burst < 1 {
		return fmt.Errorf("burst must be at least 1, got %d", burst)
	}
	if int64(burst) > int64(maxDuration)/int64(r.Interval()) {
		return fmt.Errorf("burst %d at %v is more than 290 years of tokens", burst, r)
	}
	return nil
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (b *TokenBucket) Allow() bool { return b.AllowN(time.Now(), 1).Allowed }

// AllowN takes n tokens at now if the bucket holds them. n = 0 only
// reports the state. It panics if n is negative.
func (b *TokenBucket) AllowN(now time.Time, n int) Result {
	checkN(n)
	t := nanos(now)
	if n > b.burst {
		return b.reject(t, max(b.tat.Load(), t), InfDuration)
	}
	cost := int64(n) * b.interval
	for {
		tat := b.tat.Load()
		base := max(tat, t)
		next := base + cost
		if next-t > b.capacity {
			return b.reject(t, base, time.Duration(next-t-b.capacity))
		}
		if n == 0 || b.tat.CompareAndSwap(tat, next) {
			return Result{
				Allowed:    true,
				Limit:      b.burst,
				Remaining:  int((b.capacity - (next - t)) / b.interval),
				ResetAfter: time.Duration(next - t),
			}
		}
	}
}

func (b *TokenBucket) reject(t, base int64, retry time.Duration) Result {
	return Result{
		Limit:      b.burst,
		Remaining:  int((b.capacity - (base - t)) / b.interval),
		ResetAfter: time.Duration(base - t),
		RetryAfter: retry,
	}
}

// ReserveN is AllowN: a token bucket rejects rather than delays.
func (b *TokenBucket) ReserveN(now time.Time, n int) Result { return b.AllowN(now, n) }

// idle: once tat has passed, the bucket is full, like a new one.
func (b *TokenBucket) idle(now time.Time) bool { return b.tat.Load() <= nanos(now) }
