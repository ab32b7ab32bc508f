package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// testRunner is Do with a fixed clock, seeded jitter and recorded sleeps.
func testRunner(sleeps *[]time.Duration) runner {
	rng := rand.New(rand.NewPCG(7, 7))
	return runner{
		now: func() time.Time { return t0 },
		rnd: rng.Int64N,
		sleep: func(ctx context.Context, d time.Duration) error {
			*sleeps = append(*sleeps, d)
			return ctx.Err()
		},
	}
}

var errUpstream = errors.New("upstream: 503")

func TestDoStopsAtAttemptsAndSleepsWithinCeilings(t *testing.T) {
	var sleeps []time.Duration
	p := Policy{Attempts: 4}
	calls := 0
	err := testRunner(&sleeps).do(context.Background(), p, nil, func(context.Context, int) (bool, error) {
		calls++
		return true, errUpstream
	})
	if calls != 4 {
		t.Fatalf("fn called %d times, want attempts = 4", calls)
	}
	if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, errUpstream) {
		t.Fatalf("err = %v, want ErrAttemptsExhausted wrapping the last error", err)
	}
	if len(sleeps) != 3 {
		t.Fatalf("slept %d times, want 3 (between 4 attempts)", len(sleeps))
	}
	for n, d := range sleeps {
		if c := p.BackoffCeiling(n); d < 0 || d > c {
			t.Fatalf("sleep %d = %s, outside [0, %s]", n, d, c)
		}
	}
}

func TestDoReturnsNonRetryableErrorUnchanged(t *testing.T) {
	var sleeps []time.Duration
	calls := 0
	err := testRunner(&sleeps).do(context.Background(), Policy{}, nil, func(context.Context, int) (bool, error) {
		calls++
		return false, errUpstream
	})
	if calls != 1 || err != errUpstream {
		t.Fatalf("calls = %d, err = %v; want 1 call and the error itself", calls, err)
	}
}

func TestDoStopsWhenBudgetRefuses(t *testing.T) {
	var sleeps []time.Duration
	b := NewBudget(Policy{MinRetriesPerSecond: 0.1, BudgetWindow: 10 * time.Second}) // floor: 1 retry
	calls := 0
	err := testRunner(&sleeps).do(context.Background(), Policy{Attempts: 5}, b, func(context.Context, int) (bool, error) {
		calls++
		return true, errUpstream
	})
	// 1 request deposits 0.2, the floor gives 1: one retry, then refusal.
	if calls != 2 || !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("calls = %d, err = %v; want 2 calls then ErrBudgetExhausted", calls, err)
	}
}

func TestDoPerTryTimeoutRetriesTheAttempt(t *testing.T) {
	var sleeps []time.Duration
	p := Policy{PerTryTimeout: 20 * time.Millisecond}
	var attempts []int
	err := testRunner(&sleeps).do(context.Background(), p, nil, func(ctx context.Context, attempt int) (bool, error) {
		attempts = append(attempts, attempt)
		if attempt == 0 {
			<-ctx.Done() // a hung upstream: only the per-try timeout ends it
			return false, ctx.Err()
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("attempt 1 runs without the per-try deadline")
		}
		return false, nil
	})
	if err != nil || len(attempts) != 2 {
		t.Fatalf("err = %v after attempts %v; want success on attempt 1 after attempt 0 timed out", err, attempts)
	}
}

func TestDoCallerCancellationIsNotRetried(t *testing.T) {
	var sleeps []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := testRunner(&sleeps).do(ctx, Policy{}, nil, func(context.Context, int) (bool, error) {
		calls++
		cancel()
		return true, errUpstream
	})
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("calls = %d, err = %v; want 1 call and context.Canceled", calls, err)
	}
}
