package ratelimit

import (
	"testing"
	"time"
)

// t0 is the tests' clock origin: a whole minute of Unix time, so that
// windows of a second, a minute or 100ms all start at t0.
var t0 = time.Unix(1_699_999_980, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// want compares the fields of a Result that a test cares about.
func want(t *testing.T, what string, got, exp Result) {
	t.Helper()
	if got != exp {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, exp)
	}
}

// admitted counts how many of k single events at now l admits.
func admitted(l Limiter, now time.Time, k int) int {
	n := 0
	for range k {
		if l.AllowN(now, 1).Allowed {
			n++
		}
	}
	return n
}

// checkRetryAfter pins RetryAfter: the same request is still rejected 1ns
// before it and admitted at it. Rejections change no state, so probing
// first is safe.
func checkRetryAfter(t *testing.T, l Limiter, now time.Time, n int) {
	t.Helper()
	res := l.AllowN(now, n)
	if res.Allowed {
		t.Fatalf("at %v: %d events admitted, test wants a rejection", now.Sub(t0), n)
	}
	if res.RetryAfter <= 0 || res.RetryAfter == InfDuration {
		t.Fatalf("at %v: RetryAfter %v, want a positive finite wait", now.Sub(t0), res.RetryAfter)
	}
	if r := l.AllowN(now.Add(res.RetryAfter-time.Nanosecond), n); r.Allowed {
		t.Errorf("at %v: admitted 1ns before RetryAfter %v", now.Sub(t0), res.RetryAfter)
	}
	if r := l.AllowN(now.Add(res.RetryAfter), n); !r.Allowed {
		t.Errorf("at %v: rejected at RetryAfter %v: %+v", now.Sub(t0), res.RetryAfter, r)
	}
}
