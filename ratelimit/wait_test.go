package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// waitResult is what a Wait on another goroutine returned.
type waitResult struct {
	res Result
	err error
}

// goWait runs waitOn on its own goroutine and returns where its outcome
// arrives.
func goWait(ctx context.Context, c clock.Clock, l Limiter, n int) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		res, err := waitOn(ctx, c, l, n)
		ch <- waitResult{res, err}
	}()
	return ch
}

// armed waits until the fake clock has n timers armed: the waiters under
// test have reserved and gone to sleep.
func armed(t *testing.T, f *clock.Fake, n int) {
	t.Helper()
	select {
	case <-f.Waiting(n):
	case <-time.After(10 * time.Second):
		t.Fatalf("%d timers never armed; pending %v", n, f.Pending())
	}
}

func outcome(t *testing.T, ch <-chan waitResult, what string) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Wait did not return", what)
		return waitResult{}
	}
}

func notYet(t *testing.T, ch <-chan waitResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Wait returned early: %+v, %v", what, r.res, r.err)
	default:
	}
}

// A fake clock that starts now, so that a context deadline set from its Now
// does not end in real time during the test.
func newFake() *clock.Fake { return clock.NewFake(time.Now()) }

func TestWaitOnTokenBucketSleepsUntilTheTokenIsDue(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 10, Per: time.Second}, 2) // a token every 100ms
	ctx := context.Background()
	for i := range 2 {
		if res, err := waitOn(ctx, f, b, 1); err != nil || res.Delay != 0 {
			t.Fatalf("Wait %d on a full bucket: %+v, %v; want no delay", i, res, err)
		}
	}
	ch := goWait(ctx, f, b, 1)
	armed(t, f, 1)
	if p := f.Pending(); len(p) != 1 || p[0] != 100*ms {
		t.Fatalf("the third Wait sleeps for %v, want [100ms] (one interval)", p)
	}
	f.Advance(100*ms - 1)
	notYet(t, ch, "1ns before the token is due")
	f.Advance(1)
	if r := outcome(t, ch, "at the due time"); r.err != nil || !r.res.Allowed || r.res.Delay != 100*ms {
		t.Fatalf("third Wait: %+v, %v; want allowed after a 100ms delay", r.res, r.err)
	}
	// The waited-for token was taken: the bucket is empty at the due time.
	if res := b.AllowN(f.Now(), 1); res.Allowed || res.RetryAfter != 100*ms {
		t.Fatalf("after the wait: %+v; want a rejection for one more interval", res)
	}
}

func TestWaitOnTokenBucketCancelledReturnsPromptlyAndGivesTheTokenBack(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 1, Per: time.Second}, 1)
	b.AllowN(f.Now(), 1) // empty: the next token is due in 1s
	ctx, cancel := context.WithCancel(context.Background())
	ch := goWait(ctx, f, b, 1)
	armed(t, f, 1)
	cancel()
	r := outcome(t, ch, "after cancel") // the fake clock has not moved
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Wait: %+v, %v; want context.Canceled", r.res, r.err)
	}
	// The token was given back: it is due in 1s, not 2s.
	if res := b.AllowN(f.Now(), 1); res.RetryAfter != time.Second {
		t.Fatalf("after the cancelled wait the next token is %v away, want 1s (given back): %+v", res.RetryAfter, res)
	}
	if !b.AllowN(f.Now().Add(time.Second), 1).Allowed {
		t.Fatal("the token the cancelled Wait gave back is not admitted at its time")
	}
}

func TestWaitOnTokenBucketDeadlineTooSoonFailsAtOnce(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 1, Per: time.Second}, 1)
	b.AllowN(f.Now(), 1)
	ctx, cancel := context.WithDeadline(context.Background(), f.Now().Add(999*ms))
	defer cancel()
	res, err := waitOn(ctx, f, b, 1) // returns without the clock moving
	if !errors.Is(err, context.DeadlineExceeded) || res.Allowed || res.RetryAfter != time.Second {
		t.Fatalf("Wait with a deadline before the token: %+v, %v; want DeadlineExceeded and RetryAfter 1s", res, err)
	}
	if p := f.Pending(); len(p) != 0 {
		t.Fatalf("Wait armed timers %v for a wait it cannot finish", p)
	}
	// Nothing was taken: the token is still due in 1s, and a deadline
	// exactly at it is enough.
	ctx2, cancel2 := context.WithDeadline(context.Background(), f.Now().Add(time.Second))
	defer cancel2()
	ch := goWait(ctx2, f, b, 1)
	armed(t, f, 1)
	f.Advance(time.Second)
	if r := outcome(t, ch, "deadline at the due time"); r.err != nil || r.res.Delay != time.Second {
		t.Fatalf("Wait with a deadline at the due time: %+v, %v; want admitted after 1s", r.res, r.err)
	}
}

func TestWaitOnTokenBucketMoreThanBurstIsAnErrorAtOnce(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 1, Per: time.Second}, 3)
	res, err := waitOn(context.Background(), f, b, 4)
	if !errors.Is(err, ErrLimited) || res.Allowed || res.RetryAfter != InfDuration {
		t.Fatalf("Wait(4) on a burst of 3: %+v, %v; want ErrLimited with RetryAfter InfDuration", res, err)
	}
	if got := err.Error(); got != "ratelimit: wait for 4 events: more than the limit of 3: ratelimit: rate limit exceeded" {
		t.Errorf("error %q does not say what is wrong", got)
	}
	if !b.AllowN(f.Now(), 3).Allowed {
		t.Fatal("the refused Wait took tokens")
	}
}

func TestWaitOnTokenBucketServesWaitersInArrivalOrder(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 10, Per: time.Second}, 1)
	ctx := context.Background()
	if _, err := waitOn(ctx, f, b, 1); err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	chs := make([]<-chan waitResult, waiters)
	for i := range chs {
		chs[i] = goWait(ctx, f, b, 1)
		armed(t, f, i+1) // waiter i has reserved before waiter i+1 starts
	}
	for i := range chs {
		f.Advance(100 * ms)
		r := outcome(t, chs[i], "waiter in turn")
		if r.err != nil || r.res.Delay != time.Duration(i+1)*100*ms {
			t.Fatalf("waiter %d: %+v, %v; want admitted after %v", i, r.res, r.err, time.Duration(i+1)*100*ms)
		}
		for j := i + 1; j < waiters; j++ {
			notYet(t, chs[j], "a later waiter")
		}
	}
}

func TestWaitOnTokenBucketCancelledWaiterKeepsLaterTurns(t *testing.T) {
	f := newFake()
	b := NewTokenBucket(Rate{N: 10, Per: time.Second}, 1)
	bg := context.Background()
	b.AllowN(f.Now(), 1)
	ctx, cancel := context.WithCancel(bg)
	first := goWait(ctx, f, b, 1) // due at 100ms
	armed(t, f, 1)
	second := goWait(bg, f, b, 1) // due at 200ms
	armed(t, f, 2)
	cancel()
	if r := outcome(t, first, "cancelled first waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("first waiter: %v, want context.Canceled", r.err)
	}
	// The second waiter's turn counted on the first's token, so it is not
	// given back: a newcomer waits behind the second, not before it.
	if res := b.AllowN(f.Now().Add(200*ms), 1); res.Allowed {
		t.Fatalf("a newcomer at 200ms was admitted beside the second waiter: %+v", res)
	}
	f.Advance(200 * ms)
	if r := outcome(t, second, "second waiter"); r.err != nil || r.res.Delay != 200*ms {
		t.Fatalf("second waiter: %+v, %v; want admitted after 200ms", r.res, r.err)
	}
}

func TestWaitOnWindowSleepsUntilTheWindowHasRoom(t *testing.T) {
	start := time.Now().Truncate(time.Minute).Add(time.Minute) // on a window edge, ahead of real time
	f := clock.NewFake(start)
	w := NewFixedWindow(Rate{N: 2, Per: time.Second})
	ctx := context.Background()
	w.AllowN(f.Now(), 2)
	ch := goWait(ctx, f, w, 1)
	armed(t, f, 1)
	if p := f.Pending(); len(p) != 1 || p[0] != time.Second {
		t.Fatalf("Wait on a full window sleeps %v, want [1s] (to the window edge)", p)
	}
	f.Advance(time.Second)
	if r := outcome(t, ch, "next window"); r.err != nil || !r.res.Allowed {
		t.Fatalf("Wait in the next window: %+v, %v; want admitted", r.res, r.err)
	}
	// A deadline before the window edge fails at once.
	w.AllowN(f.Now(), 1)
	dctx, cancel := context.WithDeadline(ctx, f.Now().Add(500*ms))
	defer cancel()
	if res, err := waitOn(dctx, f, w, 1); !errors.Is(err, context.DeadlineExceeded) || res.RetryAfter != time.Second {
		t.Fatalf("Wait with a deadline before the edge: %+v, %v; want DeadlineExceeded", res, err)
	}
}

// TestWaitTokenBucketConcurrentWaitersKeepTheRate runs goroutines that Wait
// in a loop on the real clock for a bounded time and counts the admissions:
// never more than burst + rate*elapsed.
func TestWaitTokenBucketConcurrentWaitersKeepTheRate(t *testing.T) {
	const rate, burst = 200, 5
	b := NewTokenBucket(Rate{N: rate, Per: time.Second}, burst)
	ctx, cancel := context.WithTimeout(context.Background(), 300*ms)
	defer cancel()
	start := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				if _, err := Wait(ctx, b, 1); err != nil {
					return
				}
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	limit := int64(burst) + int64(elapsed.Seconds()*rate) + 1
	if got := admitted.Load(); got > limit || got < burst {
		t.Fatalf("%d admitted in %v, want between the burst %d and burst+rate*elapsed = %d", got, elapsed, burst, limit)
	}
}
