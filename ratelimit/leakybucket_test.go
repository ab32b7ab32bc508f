package ratelimit

import (
	"sync"
	"testing"
	"time"
)

// TestLeakyBucketSpacesABurstEvenly: 500 arrivals at once against 100/s
// are released over 5s, exactly 10ms apart (the issue allows +-2ms; the
// arithmetic is exact), none faster.
func TestLeakyBucketSpacesABurstEvenly(t *testing.T) {
	b := NewLeakyBucket(Rate{100, time.Second}, 500, 0)
	var prev time.Duration
	for i := range 500 {
		res := b.ReserveN(t0, 1)
		if !res.Allowed {
			t.Fatalf("arrival %d rejected: %+v", i, res)
		}
		if i > 0 {
			if gap := res.Delay - prev; gap < 8*time.Millisecond || gap > 12*time.Millisecond || gap != 10*time.Millisecond {
				t.Fatalf("arrival %d leaves %v after arrival %d, want 10ms", i, gap, i-1)
			}
		}
		prev = res.Delay
	}
	if prev != 4990*time.Millisecond {
		t.Fatalf("the last of 500 leaves after %v, want 4.99s (all 500 within 5s)", prev)
	}
}

func TestLeakyBucketRejectsWhenQueueIsFull(t *testing.T) {
	b := NewLeakyBucket(Rate{10, time.Second}, 3, 0) // a slot every 100ms
	want(t, "first goes at once", b.ReserveN(t0, 1), Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 100 * time.Millisecond})
	want(t, "second waits", b.ReserveN(t0, 1), Result{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 200 * time.Millisecond, Delay: 100 * time.Millisecond})
	b.ReserveN(t0, 1)
	want(t, "fourth, the queue's last", b.ReserveN(t0, 1), Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 400 * time.Millisecond, Delay: 300 * time.Millisecond})
	want(t, "fifth: full", b.ReserveN(t0, 1), Result{Limit: 4, Remaining: 0, ResetAfter: 400 * time.Millisecond, RetryAfter: 100 * time.Millisecond})
	checkRetryAfter(t, reserver{b}, t0, 1) // took the slot at 400ms, at 100ms
	// Waiting now: the slots at 200, 300 and 400ms. The one at 200ms
	// starts at 200ms, making room for one more.
	if got := reserved(b, at(200*time.Millisecond-time.Nanosecond), 5); got != 0 {
		t.Fatalf("just before 200ms admitted %d, want 0", got)
	}
	if got := reserved(b, at(200*time.Millisecond), 5); got != 1 {
		t.Fatalf("at 200ms admitted %d, want 1", got)
	}
	if got := reserved(b, at(10*time.Second), 10); got != 4 {
		t.Fatalf("after draining admitted %d, want queue+1 = 4", got)
	}
	want(t, "more than the queue holds", b.ReserveN(at(time.Hour), 5), Result{Limit: 4, Remaining: 4, RetryAfter: InfDuration})
}

func TestLeakyBucketMaxWait(t *testing.T) {
	b := NewLeakyBucket(Rate{10, time.Second}, 100, 250*time.Millisecond)
	if got := reserved(b, t0, 10); got != 3 {
		t.Fatalf("admitted %d, want 3 (delays 0, 100ms and 200ms; 300ms exceeds max_wait)", got)
	}
	res := b.ReserveN(t0, 1)
	if res.Allowed || res.RetryAfter != 50*time.Millisecond {
		t.Fatalf("fourth: %+v, want a rejection with RetryAfter 50ms (delay 300ms - max_wait 250ms)", res)
	}
	checkRetryAfter(t, reserver{b}, t0, 1)
}

func TestLeakyBucketAllowNOnlyWhenNothingWaits(t *testing.T) {
	b := NewLeakyBucket(Rate{10, time.Second}, 5, 0)
	want(t, "free slot", b.AllowN(t0, 1), Result{Allowed: true, Limit: 6, Remaining: 5, ResetAfter: 100 * time.Millisecond})
	want(t, "busy slot", b.AllowN(at(40*time.Millisecond), 1), Result{Limit: 6, Remaining: 5, ResetAfter: 60 * time.Millisecond, RetryAfter: 60 * time.Millisecond})
	checkRetryAfter(t, b, at(40*time.Millisecond), 1)
}

func TestLeakyBucketNoOverAdmissionUnderContention(t *testing.T) {
	const queue, perG = 50, 1_000_000
	b := NewLeakyBucket(Rate{100, time.Second}, queue, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var delays []time.Duration
	for range 2 {
		wg.Go(func() {
			var mine []time.Duration
			for range perG {
				if res := b.ReserveN(t0, 1); res.Allowed {
					mine = append(mine, res.Delay)
				}
			}
			mu.Lock()
			delays = append(delays, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(delays) != queue+1 {
		t.Fatalf("2 goroutines x %d at one instant admitted %d, want queue+1 = %d", perG, len(delays), queue+1)
	}
	seen := map[time.Duration]bool{}
	for _, d := range delays {
		if d%(10*time.Millisecond) != 0 || d > queue*10*time.Millisecond || seen[d] {
			t.Fatalf("delays %v: want each multiple of 10ms up to %v exactly once", delays, queue*10*time.Millisecond)
		}
		seen[d] = true
	}
}

// reserver makes a LeakyBucket's ReserveN the AllowN of a Limiter, for
// the helpers.
type reserver struct{ b *LeakyBucket }

func (r reserver) AllowN(now time.Time, n int) Result   { return r.b.ReserveN(now, n) }
func (r reserver) ReserveN(now time.Time, n int) Result { return r.b.ReserveN(now, n) }

func reserved(b *LeakyBucket, now time.Time, k int) int { return admitted(reserver{b}, now, k) }
