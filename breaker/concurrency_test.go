package breaker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// Under concurrent Allow/Done from many goroutines with a shared moving
// clock, the breaker must stay consistent: run with -race. Every
// transition is legal and announced exactly once, in order: each
// announcement starts where the one before it ended, and the last ends
// where the breaker is.
func TestBreakerConcurrentAllowDone(t *testing.T) {
	b, err := New(Config{WindowSize: 50, MinRequests: 10, OpenFor: time.Millisecond, MaxOpenFor: 4 * time.Millisecond, HalfOpenProbes: 2})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var moves [][2]State // from→to, in announcement order
	var bad []string
	b.OnStateChange(func(from, to State, reason string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		moves = append(moves, [2]State{from, to})
		legal := (from == Closed && to == Open) || (from == Open && to == HalfOpen) ||
			(from == HalfOpen && (to == Open || to == Closed))
		if !legal {
			bad = append(bad, fmt.Sprintf("%v→%v (%s)", from, to, reason))
		}
	})
	var clock atomic.Int64
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				now := t0.Add(time.Duration(clock.Add(int64(time.Microsecond))))
				tk, err := b.Allow(now)
				if err != nil {
					refused.Add(1)
					continue
				}
				o := endpoint.Outcome{Status: 200}
				switch (i + g) % 4 {
				case 0, 1:
					o.Err = errBoom
				case 2:
					o.Canceled, o.Err = true, context.Canceled
				}
				tk.Done(o, now)
			}
		})
	}
	wg.Wait()
	final := b.State(t0.Add(time.Duration(clock.Load()))) // before mu: it may announce
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("illegal transitions announced: %v", bad)
	}
	// In order and exactly once: a transition announced twice, lost, or
	// announced out of turn breaks the chain.
	prev := Closed
	for i, m := range moves {
		if m[0] != prev {
			t.Errorf("announcement %d is %v→%v, but the one before ended in %v", i, m[0], m[1], prev)
			break
		}
		prev = m[1]
	}
	if prev != final {
		t.Errorf("the announcements end in %v, the breaker is %v", prev, final)
	}
	if len(moves) == 0 || refused.Load() == 0 {
		t.Errorf("with 2 of 3 counted calls failing: %d transitions and %d refusals, want some of each", len(moves), refused.Load())
	}
}

func TestBreakerAllowDoneAllocatesNothing(t *testing.T) {
	for _, wt := range []string{WindowCount, WindowTime} {
		b, err := New(Config{WindowType: wt, SlowThreshold: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		o := endpoint.Outcome{Status: 200, Latency: time.Millisecond}
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			tk, err := b.Allow(now)
			if err != nil {
				t.Fatal(err)
			}
			tk.Done(o, now)
		})
		if allocs != 0 {
			t.Errorf("%s window: Allow+Done allocates %v times per call, want 0", wt, allocs)
		}
		// The refused path too.
		b.mu.Lock()
		b.openLocked(now, time.Hour, "test")
		b.mu.Unlock()
		allocs = testing.AllocsPerRun(1000, func() {
			if _, err := b.Allow(now); err == nil {
				t.Fatal("Allow on an open breaker succeeded")
			}
		})
		if allocs != 0 {
			t.Errorf("%s window: a refused Allow allocates %v times per call, want 0", wt, allocs)
		}
	}
}

func TestBreakerDo(t *testing.T) {
	b, err := New(Config{WindowSize: 4, MinRequests: 2, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	ok := func(context.Context) error { calls++; return nil }
	fail := func(context.Context) error { calls++; return errBoom }
	ctx := context.Background()

	if err := b.Do(ctx, ok); err != nil {
		t.Fatalf("Do(ok) = %v", err)
	}
	// The caller's own cancellation counts neither way.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for range 5 {
		if err := b.Do(canceled, func(ctx context.Context) error { calls++; return ctx.Err() }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do(canceled) = %v, want context.Canceled", err)
		}
	}
	if s := b.State(time.Now()); s != Closed {
		t.Fatalf("after 1 success and 5 caller cancellations: %v, want closed", s)
	}
	if err := b.Do(ctx, fail); !errors.Is(err, errBoom) {
		t.Fatalf("Do(fail) = %v, want fn's error", err)
	}
	if s := b.State(time.Now()); s != Open {
		t.Fatalf("after 1 success and 1 failure (50%% of min_requests 2): %v, want open", s)
	}
	before := calls
	if err := b.Do(ctx, ok); !errors.Is(err, ErrOpen) {
		t.Fatalf("Do on an open breaker = %v, want ErrOpen", err)
	}
	if calls != before {
		t.Errorf("Do on an open breaker called fn")
	}
}

// A context deadline is a timeout, and timeouts are failures.
func TestBreakerDoCountsDeadlineAsFailure(t *testing.T) {
	b, _ := New(Config{WindowSize: 1, MinRequests: 1})
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	b.Do(ctx, func(ctx context.Context) error { return ctx.Err() })
	if s := b.State(time.Now()); s != Open {
		t.Fatalf("after a deadline-exceeded call: %v, want open", s)
	}
}

// A panicking fn must not leak a half-open probe slot.
func TestBreakerDoPanicCountsAsFailure(t *testing.T) {
	b, _ := New(Config{WindowSize: 1, MinRequests: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Do swallowed the panic")
			}
		}()
		b.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	if s := b.State(time.Now()); s != Open {
		t.Fatalf("after a panicking call: %v, want open", s)
	}
}

func TestBreakerClassifierOption(t *testing.T) {
	// Count 429 as a failure and ignore errors entirely.
	b, _ := New(Config{WindowSize: 1, MinRequests: 1}, WithClassifier(func(o endpoint.Outcome) Verdict {
		switch {
		case o.Err != nil:
			return Ignore
		case o.Status == 429:
			return Failure
		}
		return Success
	}))
	tk, _ := b.Allow(t0)
	tk.Done(endpoint.Outcome{Err: errBoom}, t0)
	if s := b.State(t0); s != Closed {
		t.Fatalf("after an ignored error: %v, want closed", s)
	}
	tk, _ = b.Allow(t0)
	tk.Done(endpoint.Outcome{Status: 429}, t0)
	if s := b.State(t0); s != Open {
		t.Fatalf("after a 429 classified as failure: %v, want open", s)
	}
}

// A listener may call back into the breaker: it runs outside the lock.
func TestBreakerListenerMayCallBreaker(t *testing.T) {
	b, _ := New(Config{WindowSize: 1, MinRequests: 1})
	var seen []State
	b.OnStateChange(func(_, to State, _ string, at time.Time) { seen = append(seen, b.State(at)) })
	tk, _ := b.Allow(t0)
	tk.Done(endpoint.Outcome{Err: errBoom}, t0)
	if len(seen) != 1 || seen[0] != Open {
		t.Fatalf("listener saw %v, want [open]", seen)
	}
}

func TestTicketZeroValueDoneIsNoOp(t *testing.T) {
	var tk Ticket
	tk.Done(endpoint.Outcome{Err: errBoom}, t0) // must not panic
}

// The count window is written without a lock: concurrent calls may take
// their slots in one order and update the running sums in another, but
// once they have all returned, the sums are exactly what the ring holds.
// A small ring and many goroutines make calls overtake each other in the
// same slot.
func TestCountWindowConcurrentRecordingAddsUp(t *testing.T) {
	const size, goroutines, each = 3, 8, 50000
	w := newCountWindow(size)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				w.record(uint32((i + g) % 4)) // success, failed, slow, failed and slow
			}
		})
	}
	close(start)
	wg.Wait()
	// Every failed or slow call takes a slot; a success may be skipped
	// when the window holds successes only.
	if n := w.seq.Load(); n < goroutines*each*3/4 || n > goroutines*each {
		t.Fatalf("seq %d, want between the %d failed or slow calls and all %d", n, goroutines*each*3/4, goroutines*each)
	}
	var failures, slow uint64
	for i := range w.ring {
		f := w.ring[i].Load()
		failures += uint64(f & flagFailed)
		slow += uint64(f&flagSlow) >> 1
	}
	if got, want := w.bad.Load(), failures|slow<<32; got != want {
		t.Errorf("running sums: %d failures, %d slow; the ring holds %d failures, %d slow",
			uint32(got), got>>32, failures, slow)
	}
}

// The time window is written without a lock too, and its head moves while
// calls record: a call that read the old head adds to the old bucket. No
// outcome within the window is lost, and the next move of the head counts
// them all.
func TestTimeWindowConcurrentRecordingLosesNothing(t *testing.T) {
	const goroutines, each = 8, 2000
	w := newTimeWindow(int64(time.Millisecond), 10)
	base := t0.UnixNano()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				// Times over buckets 0-8 of the window, each goroutine's
				// out of step with the others'.
				at := base + int64((i*goroutines+g)*9/(each*goroutines)*int(time.Millisecond)) + int64(g)
				w.record(at, uint32(i%2))
			}
		})
	}
	wg.Wait()
	c := w.record(base+int64(9*time.Millisecond), 0) // moves the head to bucket 9: a recount
	if want := (counts{total: goroutines*each + 1, failures: goroutines * each / 2}); c != want {
		t.Errorf("after %d concurrent calls over 9 buckets and one more: %+v, want %+v", goroutines*each, c, want)
	}
}

// When concurrent calls all meet a rule at once, the breaker opens once:
// the first to take the lock opens it, the others find a new phase.
func TestBreakerConcurrentFailuresOpenItOnce(t *testing.T) {
	for range 20 {
		b, err := New(Config{WindowSize: 10, FailureCount: 1, OpenFor: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		b.OnStateChange(func(from, to State, reason string, _ time.Time) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%v→%v: %s", from, to, reason))
			mu.Unlock()
		})
		// Admit every call first, so that all report on the closed phase.
		tickets := make([]Ticket, 8)
		for i := range tickets {
			if tickets[i], err = b.Allow(t0); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, tk := range tickets {
			wg.Go(func() {
				<-start
				tk.Done(endpoint.Outcome{Err: errBoom}, t0)
			})
		}
		close(start)
		wg.Wait()
		if want := []string{"closed→open: open: 1 failure within the last 10 calls"}; !slices.Equal(got, want) {
			t.Fatalf("8 concurrent failures with failure_count 1: transitions %q, want %q", got, want)
		}
	}
}

// Half-open, concurrent Allows are admitted up to half_open_probes and
// refused after (the refusal reads a flag without the lock); the breaker
// turns half-open once, however many calls find the open period over.
func TestBreakerConcurrentAllowHalfOpenAdmitsTheProbesOnly(t *testing.T) {
	for range 20 {
		b, err := New(Config{WindowSize: 1, MinRequests: 1, OpenFor: time.Second, HalfOpenProbes: 3})
		if err != nil {
			t.Fatal(err)
		}
		var halfOpens atomic.Int64
		b.OnStateChange(func(_, to State, _ string, _ time.Time) {
			if to == HalfOpen {
				halfOpens.Add(1)
			}
		})
		tk, _ := b.Allow(t0)
		tk.Done(endpoint.Outcome{Err: errBoom}, t0)
		if s := b.State(t0); s != Open {
			t.Fatalf("after a failure with min_requests 1: %v, want open", s)
		}
		later := t0.Add(time.Second)
		start := make(chan struct{})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-start
				for range 10 {
					if _, err := b.Allow(later); err == nil {
						admitted.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if n := admitted.Load(); n != 3 {
			t.Fatalf("80 concurrent Allows when half-open with 3 probe slots: %d admitted, want 3", n)
		}
		if n := halfOpens.Load(); n != 1 {
			t.Fatalf("open→half-open announced %d times, want once", n)
		}
	}
}

// A listener may call the breaker, even into a transition of its own: the
// transition is announced when the listener returns, after the one being
// announced, and nothing deadlocks. A listener that panics does not stop
// later announcements.
func TestListenersMayCallTheBreakerAndPanicsDoNotStopAnnouncements(t *testing.T) {
	b, err := New(Config{ConsecutiveFailures: 1, OpenFor: time.Second, HalfOpenProbes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var moves []string
	panicked := false
	b.OnStateChange(func(from, to State, _ string, at time.Time) {
		moves = append(moves, from.String()+"→"+to.String())
		if to == Open {
			// Past the open period: State moves it to half-open, from
			// inside this listener.
			if st := b.State(at.Add(2 * time.Second)); st != HalfOpen {
				t.Errorf("State inside the listener: %v, want half-open", st)
			}
			if !panicked {
				panicked = true
				panic("listener panic")
			}
		}
	})
	tk, _ := b.Allow(t0)
	func() {
		defer func() {
			if r := recover(); r != "listener panic" {
				t.Fatalf("recovered %v, want the listener's panic", r)
			}
		}()
		tk.Done(endpoint.Outcome{Err: errBoom}, t0)
	}()
	// The half-open transition made inside the panicking listener is
	// still pending; the next transition announces it first.
	tk, err = b.Allow(t0.Add(2 * time.Second))
	if err != nil {
		t.Fatalf("the half-open probe was refused: %v", err)
	}
	tk.Done(endpoint.Outcome{Err: errBoom}, t0.Add(2*time.Second)) // reopens; its listener calls State again
	want := []string{"closed→open", "open→half-open", "half-open→open", "open→half-open"}
	if !slices.Equal(moves, want) {
		t.Fatalf("announced %v, want %v", moves, want)
	}
}
