package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// InfDuration is the RetryAfter of a request that can never be allowed:
// n exceeds the limiter's capacity.
const InfDuration = time.Duration(math.MaxInt64)

// Result is a limiter's decision about n events at one instant. It carries
// what a server needs for the RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset and Retry-After headers (see SetHeaders).
type Result struct {
	// Allowed reports whether the events were admitted (and counted).
	Allowed bool
	// Limit is the limiter's capacity: the burst of a token bucket, the
	// queue plus one of a leaky bucket, N of a window limiter.
	Limit int
	// Remaining is how many more single events would be admitted at the
	// same instant, after this decision.
	Remaining int
	// ResetAfter is the time until the limiter is back at full capacity
	// if nothing else arrives: the bucket refilled or drained, the window
	// over.
	ResetAfter time.Duration
	// RetryAfter is, when Allowed is false, the time until the same n
	// events would be admitted; InfDuration when n exceeds the capacity.
	// Zero when Allowed is true.
	RetryAfter time.Duration
	// Delay is, when Allowed is true, how long the caller must wait before
	// acting: only a leaky bucket's ReserveN sets it (the caller's slot in
	// the evenly spaced output). Zero otherwise.
	Delay time.Duration
}

// Limiter is what every rate-limiting algorithm of this package implements.
// Both methods take the time as a parameter, so that tests and simulations
// need no clock; pass time.Now() in production.
type Limiter interface {
	// AllowN reports whether n events may happen at now, and counts them if
	// so. It never asks the caller to wait: a leaky bucket admits only
	// when its output slot is free at now.
	AllowN(now time.Time, n int) Result
	// ReserveN is AllowN for the limiters that can delay instead of
	// reject: a leaky bucket admits n events into its queue and returns
	// the Delay after which the caller may act. For the other algorithms
	// it is the same as AllowN. A reservation cannot be cancelled.
	ReserveN(now time.Time, n int) Result
}

// ErrLimited is returned by Wait when the limiter rejects the events and
// waiting would not help: a leaky bucket's queue is full, or n is more than
// the limiter's capacity (the error then says so and wraps ErrLimited).
var ErrLimited = errors.New("ratelimit: rate limit exceeded")

// Wait blocks until l admits n events, or until ctx ends. It is the call
// for code that would rather wait its turn than be refused: a job runner,
// a client pacing its own calls. It reads the clock with time.Now.
//
// What waiting means depends on the algorithm:
//
//   - TokenBucket: Wait reserves the n tokens at once, in arrival order,
//     and sleeps until they are due, as golang.org/x/time/rate's
//     Limiter.Wait does. Concurrent waiters are served first come, first
//     served, and together never exceed the bucket's rate. If ctx ends
//     before the tokens are due, or has a deadline that would end it
//     first, the tokens are given back (to the extent no later waiter's
//     reservation depends on them) and Wait returns ctx's error at once
//     (wrapping context.DeadlineExceeded for a deadline too short to
//     wait for).
//   - LeakyBucket: Wait takes a place in the queue (ReserveN) and sleeps
//     for its Delay. A full queue, or a wait beyond MaxWait, is refused
//     with ErrLimited: the queue's bound is the point of the algorithm.
//     A place left when ctx ends is not given back.
//   - FixedWindow, SlidingWindow, SlidingLog and any other Limiter: Wait
//     tries, and on a rejection sleeps for its RetryAfter (the window
//     edge, or when enough of the window has slid by) and tries again,
//     unless ctx's deadline comes first. Waiters are not queued: after a
//     sleep, a newcomer may take the room first.
//
// n larger than the limiter's capacity (Result.Limit) can never be
// admitted: Wait returns at once with an error wrapping ErrLimited. n = 0
// returns at once. The Result is the admitting decision (or the one that
// ended the wait).
func Wait(ctx context.Context, l Limiter, n int) (Result, error) {
	return waitOn(ctx, clock.Real, l, n)
}

// waitOn is Wait on the Clock c: tests pass a clock.Fake.
func waitOn(ctx context.Context, c clock.Clock, l Limiter, n int) (Result, error) {
	checkN(n)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	for {
		now := c.Now()
		budget := InfDuration // how long ctx lets us wait
		if dl, ok := ctx.Deadline(); ok {
			budget = dl.Sub(now)
		}
		switch l := l.(type) {
		case *TokenBucket:
			res, end := l.reserveN(now, n, budget)
			if !res.Allowed {
				return res, waitError(res, n, budget)
			}
			if err := clock.SleepOn(ctx, c, res.Delay); err != nil {
				l.cancel(c.Now(), end, n)
				return res, err
			}
			return res, nil
		case *LeakyBucket:
			res := l.ReserveN(now, n)
			if !res.Allowed {
				return res, waitError(res, n, InfDuration)
			}
			return res, clock.SleepOn(ctx, c, res.Delay)
		default:
			res := l.ReserveN(now, n)
			if res.Allowed {
				return res, clock.SleepOn(ctx, c, res.Delay)
			}
			if res.RetryAfter == InfDuration || res.RetryAfter > budget {
				return res, waitError(res, n, budget)
			}
			if err := clock.SleepOn(ctx, c, res.RetryAfter); err != nil {
				return res, err
			}
		}
	}
}

// waitError is Wait's error for a rejection res of n events when ctx
// allows waiting for budget.
func waitError(res Result, n int, budget time.Duration) error {
	switch {
	case res.RetryAfter == InfDuration:
		return fmt.Errorf("ratelimit: wait for %d events: more than the limit of %d: %w", n, res.Limit, ErrLimited)
	case res.RetryAfter > budget && budget != InfDuration:
		return fmt.Errorf("ratelimit: wait for %d events: the wait of %v would pass the context's deadline: %w",
			n, res.RetryAfter, context.DeadlineExceeded)
	default:
		return ErrLimited
	}
}

// Sleep waits for d on a timer, or until ctx ends, in which case it returns
// ctx's error. A caller holding several reservations sleeps for the largest
// Delay.
func Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }

// SetHeaders sets the RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset headers of the IETF draft "RateLimit header fields for
// HTTP" from r, and Retry-After when r was rejected. Reset and Retry-After
// are whole seconds rounded up (Retry-After at least 1). A request checked
// by several limiters should report the Result that rejected it, or else
// the one with the least Remaining.
func (r Result) SetHeaders(h http.Header) {
	h["Ratelimit-Limit"] = []string{strconv.Itoa(r.Limit)}
	h["Ratelimit-Remaining"] = []string{strconv.Itoa(max(r.Remaining, 0))}
	h["Ratelimit-Reset"] = []string{strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)}
	if !r.Allowed {
		h["Retry-After"] = []string{strconv.FormatInt(max(ceilSeconds(r.RetryAfter), 1), 10)}
	}
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// fresh is the state of a bucket that has never been used: further in the
// past than any time clock.Nanos returns.
const fresh = math.MinInt64

// limiter is a Limiter that Keyed can manage: it knows when it has become
// equivalent to a new one.
type limiter interface {
	Limiter
	// idle reports whether the limiter would behave exactly like a new
	// one at now (and at any later time), so that dropping it and
	// creating a new one later changes no decision.
	idle(now time.Time) bool
	// PeekN reports what ReserveN(now, n) would return, counting nothing
	// (peek.go).
	PeekN(now time.Time, n int) Result
}

func checkN(n int) {
	if n < 0 {
		panic("ratelimit: negative n")
	}
}
