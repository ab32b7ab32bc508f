package ratelimit

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const ms = time.Millisecond

// TestFixedWindowAdmitsTwiceTheLimitAcrossAnEdge documents the fixed
// window's known weakness: N at the end of one window and N at the start
// of the next, 2N within 1ms.
func TestFixedWindowAdmitsTwiceTheLimitAcrossAnEdge(t *testing.T) {
	w := NewFixedWindow(Rate{5, time.Second})
	if got := admitted(w, at(999*ms), 10); got != 5 {
		t.Fatalf("at 999ms admitted %d, want 5", got)
	}
	want(t, "sixth at 999ms", w.AllowN(at(999*ms), 1), Result{Limit: 5, Remaining: 0, ResetAfter: ms, RetryAfter: ms})
	if got := admitted(w, at(1000*ms), 10); got != 5 {
		t.Fatalf("at 1000ms admitted %d more, want 5: the 2N edge burst", got)
	}
}

func TestFixedWindowCountsAndResets(t *testing.T) {
	w := NewFixedWindow(Rate{3, time.Minute})
	want(t, "first", w.AllowN(at(20*time.Second), 1), Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 40 * time.Second})
	want(t, "two more", w.AllowN(at(30*time.Second), 2), Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 30 * time.Second})
	checkRetryAfter(t, w, at(59*time.Second), 1)
	// The clock steps back into the previous window: that counts against
	// the current one instead of reopening the old one.
	if got := admitted(w, at(30*time.Second), 5); got != 2 {
		t.Fatalf("back in the old window admitted %d, want the current window's remaining 2", got)
	}
	want(t, "n over the limit", w.AllowN(at(time.Hour), 4), Result{Limit: 3, Remaining: 3, ResetAfter: time.Minute, RetryAfter: InfDuration})
}

// TestSlidingWindowPreventsTheEdgeBurst: the same traffic as the fixed
// window's edge burst gets N, not 2N, through the counter.
func TestSlidingWindowPreventsTheEdgeBurst(t *testing.T) {
	for name, l := range map[string]Limiter{
		"counter": NewSlidingWindow(Rate{5, time.Second}),
		"log":     NewSlidingLog(Rate{5, time.Second}),
	} {
		if got := admitted(l, at(999*ms), 10); got != 5 {
			t.Fatalf("%s: at 999ms admitted %d, want 5", name, got)
		}
		if got := admitted(l, at(1000*ms), 10); got != 0 {
			t.Errorf("%s: at 1000ms admitted %d, want 0 (no edge burst)", name, got)
		}
		if got := admitted(l, at(1001*ms), 10); got != 0 {
			t.Errorf("%s: at 1001ms admitted %d, want 0", name, got)
		}
	}
}

func TestSlidingWindowCounterWeighsThePreviousWindow(t *testing.T) {
	w := NewSlidingWindow(Rate{5, time.Second})
	admitted(w, at(999*ms), 5)
	// At 1.2s the previous window still covers 80%: ceil(5*0.8) = 4.
	want(t, "at 1.2s", w.AllowN(at(1200*ms), 1), Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 1800 * ms})
	// At 1.6s: ceil(5*0.4) = 2, plus 1 of this window: 2 left.
	if got := admitted(w, at(1600*ms), 5); got != 2 {
		t.Fatalf("at 1.6s admitted %d, want 2", got)
	}
	// At 2.5s the previous window (3 events) weighs ceil(1.5) = 2.
	if got := admitted(w, at(2500*ms), 5); got != 3 {
		t.Fatalf("at 2.5s admitted %d, want 3", got)
	}
	// Two windows of silence forget everything.
	if got := admitted(w, at(4*time.Second), 9); got != 5 {
		t.Fatalf("after silence admitted %d, want 5", got)
	}
}

func TestSlidingWindowCounterRetryAfter(t *testing.T) {
	// The previous window must lose weight: 200ms into the next window.
	w := NewSlidingWindow(Rate{5, time.Second})
	admitted(w, at(999*ms), 5)
	want(t, "after the edge", w.AllowN(at(1000*ms), 1), Result{Limit: 5, Remaining: 0, ResetAfter: time.Second, RetryAfter: 200 * ms})
	checkRetryAfter(t, w, at(1000*ms), 1)

	// The current window is full: wait for it to become the previous one
	// and lose weight.
	w = NewSlidingWindow(Rate{5, time.Second})
	admitted(w, at(500*ms), 5)
	want(t, "full window", w.AllowN(at(600*ms), 1), Result{Limit: 5, Remaining: 0, ResetAfter: 1400 * ms, RetryAfter: 600 * ms})
	checkRetryAfter(t, w, at(600*ms), 1)

	w = NewSlidingWindow(Rate{7, time.Second})
	admitted(w, at(100*ms), 2)
	admitted(w, at(1100*ms), 4)
	checkRetryAfter(t, w, at(1100*ms), 3)
	checkRetryAfter(t, w, at(1300*ms), 6)
}

func TestSlidingLogIsExact(t *testing.T) {
	l := NewSlidingLog(Rate{5, time.Second})
	admitted(l, at(999*ms), 5)
	want(t, "full", l.AllowN(at(1500*ms), 1), Result{Limit: 5, Remaining: 0, ResetAfter: 499 * ms, RetryAfter: 499 * ms})
	checkRetryAfter(t, l, at(1500*ms), 1)

	// Random arrivals: any N+1 admitted events span at least the window.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int{1, 3, 10, 100} {
		l := NewSlidingLog(Rate{limit, time.Second})
		var times []time.Duration
		now := time.Duration(0)
		for range 20000 {
			now += time.Duration(rng.IntN(int(2 * time.Second / time.Duration(limit))))
			if n := 1 + rng.IntN(2); l.AllowN(at(now), n).Allowed {
				for range n {
					times = append(times, now)
				}
			}
		}
		for i := limit; i < len(times); i++ {
			if times[i]-times[i-limit] < time.Second {
				t.Fatalf("limit %d: events at %v and %v: %d within 1s", limit, times[i-limit], times[i], limit+1)
			}
		}
		if len(times) < 1000 {
			t.Fatalf("limit %d: only %d admitted; the test exercises too little", limit, len(times))
		}
	}
}

func TestWindowsNoOverAdmissionUnderContention(t *testing.T) {
	const perG = 100_000
	for name, l := range map[string]Limiter{
		"fixed":   NewFixedWindow(Rate{500, time.Second}),
		"counter": NewSlidingWindow(Rate{500, time.Second}),
		"log":     NewSlidingLog(Rate{500, time.Second}),
	} {
		var wg sync.WaitGroup
		counts := make([]int, 2)
		for g := range counts {
			wg.Go(func() {
				for range perG {
					if l.AllowN(at(100*ms), 1).Allowed {
						counts[g]++
					}
				}
			})
		}
		wg.Wait()
		if got := counts[0] + counts[1]; got != 500 {
			t.Errorf("%s: admitted %d, want exactly 500", name, got)
		}
	}
}

func TestWindowsAllowNDoesNotAllocate(t *testing.T) {
	for name, l := range map[string]Limiter{
		"fixed":   NewFixedWindow(Rate{5, time.Second}),
		"counter": NewSlidingWindow(Rate{5, time.Second}),
		"log":     NewSlidingLog(Rate{5, time.Second}),
	} {
		l.AllowN(t0, 5) // the log grows to its limit
		now := t0
		if n := testing.AllocsPerRun(1000, func() {
			now = now.Add(100 * ms)
			l.AllowN(now, 1)
		}); n != 0 {
			t.Errorf("%s: AllowN allocates %v times per call, want 0", name, n)
		}
	}
}
