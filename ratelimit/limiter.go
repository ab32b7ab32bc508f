package ratelimit

import (
	"context"
	"errors"
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

// ErrLimited is returned by Wait when the limiter rejects the events.
var ErrLimited = errors.New("ratelimit: rate limit exceeded")

// Wait reserves n events on l at time.Now() and sleeps for the reservation's
// Delay, returning early with ctx's error if ctx ends first (the reserved
// slot is then lost, not returned to the limiter). When l rejects the events
// Wait returns at once with ErrLimited and the Result, whose RetryAfter says
// when to try again.
func Wait(ctx context.Context, l Limiter, n int) (Result, error) {
	res := l.ReserveN(time.Now(), n)
	if !res.Allowed {
		return res, ErrLimited
	}
	return res, Sleep(ctx, res.Delay)
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
}

func checkN(n int) {
	if n < 0 {
		panic("ratelimit: negative n")
	}
}
