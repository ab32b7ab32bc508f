package ratelimit

import (
	"sync"
	"testing"
	"time"
)

func TestTokenBucketBurstThenRefill(t *testing.T) {
	b := NewTokenBucket(Rate{10, time.Second}, 5) // a token every 100ms
	want(t, "first", b.AllowN(t0, 1), Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * time.Millisecond})
	for i := 2; i <= 5; i++ {
		b.AllowN(t0, 1)
	}
	want(t, "burst used up", b.AllowN(t0, 0), Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * time.Millisecond})
	want(t, "sixth", b.AllowN(t0, 1), Result{Limit: 5, Remaining: 0, ResetAfter: 500 * time.Millisecond, RetryAfter: 100 * time.Millisecond})

	// 250ms later 2.5 tokens have come back: 2 can be taken, the third
	// token is 50ms away.
	want(t, "two after 250ms", b.AllowN(at(250*time.Millisecond), 2), Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 450 * time.Millisecond})
	want(t, "third after 250ms", b.AllowN(at(250*time.Millisecond), 1), Result{Limit: 5, Remaining: 0, ResetAfter: 450 * time.Millisecond, RetryAfter: 50 * time.Millisecond})

	// Long idle: full again, never more than the burst.
	want(t, "burst after idle", b.AllowN(at(time.Hour), 5), Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * time.Millisecond})
	want(t, "more than burst", b.AllowN(at(2*time.Hour), 6), Result{Limit: 5, Remaining: 5, RetryAfter: InfDuration})
}

func TestTokenBucketAdmitsOnePerIntervalWhenDrained(t *testing.T) {
	b := NewTokenBucket(Rate{10, time.Second}, 3)
	if got := admitted(b, t0, 10); got != 3 {
		t.Fatalf("at t0 admitted %d, want the burst 3", got)
	}
	for k := 1; k <= 100; k++ {
		now := at(time.Duration(k) * 100 * time.Millisecond)
		if got := admitted(b, now.Add(-time.Nanosecond), 3); got != 0 {
			t.Fatalf("1ns before token %d: admitted %d, want 0", k, got)
		}
		if got := admitted(b, now, 3); got != 1 {
			t.Fatalf("at token %d: admitted %d, want 1", k, got)
		}
	}
	// Over 10s: 3 + 100 in total, which is burst + rate*elapsed.
}

func TestTokenBucketRetryAfterIsExact(t *testing.T) {
	b := NewTokenBucket(Rate{3, time.Second}, 4) // 333333333ns per token
	admitted(b, t0, 4)
	checkRetryAfter(t, b, t0, 1)
	checkRetryAfter(t, drainedBucket(t0, 4), at(10*time.Millisecond), 3)
}

// drainedBucket returns a 3/s bucket of the given burst, emptied at now.
func drainedBucket(now time.Time, burst int) *TokenBucket {
	b := NewTokenBucket(Rate{3, time.Second}, burst)
	b.AllowN(now, burst)
	return b
}

func TestTokenBucketTimeGoingBackwardsDoesNotRefill(t *testing.T) {
	b := NewTokenBucket(Rate{1, time.Second}, 2)
	admitted(b, at(time.Minute), 2)
	if got := admitted(b, t0, 5); got != 0 {
		t.Fatalf("a minute earlier admitted %d, want 0", got)
	}
}

// TestTokenBucketNoOverAdmissionUnderContention guards against the bug
// class of golang/go#71360: concurrent callers at one instant must admit
// exactly the burst, and later exactly burst + rate*elapsed in total.
func TestTokenBucketNoOverAdmissionUnderContention(t *testing.T) {
	const burst, perG = 1000, 1_000_000
	b := NewTokenBucket(Rate{100, time.Second}, burst)
	run := func(now time.Time) int {
		var wg sync.WaitGroup
		counts := make([]int, 2)
		for g := range counts {
			wg.Go(func() {
				for range perG {
					if b.AllowN(now, 1).Allowed {
						counts[g]++
					}
				}
			})
		}
		wg.Wait()
		return counts[0] + counts[1]
	}
	if got := run(t0); got != burst {
		t.Fatalf("2 goroutines x %d at one instant admitted %d, want exactly burst %d", perG, got, burst)
	}
	// 1.5s later 150 tokens have come back.
	if got := run(at(1500 * time.Millisecond)); got != 150 {
		t.Fatalf("1.5s later admitted %d more, want exactly rate*elapsed = 150 (total burst+150)", got)
	}
}

func TestTokenBucketAllowUsesTheClock(t *testing.T) {
	b := NewTokenBucket(Rate{1, time.Hour}, 1)
	if !b.Allow() || b.Allow() {
		t.Fatal("Allow on a 1/h bucket of burst 1: want true, then false")
	}
}

func TestTokenBucketPanicsOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"burst 0":    func() { NewTokenBucket(Rate{1, time.Second}, 0) },
		"rate 0":     func() { NewTokenBucket(Rate{0, time.Second}, 1) },
		"negative n": func() { NewTokenBucket(Rate{1, time.Second}, 1).AllowN(t0, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestTokenBucketAllowNDoesNotAllocate(t *testing.T) {
	b := NewTokenBucket(Rate{1000, time.Second}, 10)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		b.AllowN(now, 1)
	}); n != 0 {
		t.Fatalf("AllowN allocates %v times per call, want 0", n)
	}
}
