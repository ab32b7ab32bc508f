package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/switchboard-dev/switchboard/internal/ctxtime"
)

// ErrAttemptsExhausted wraps the last error when every attempt failed.
var ErrAttemptsExhausted = errors.New("retry: attempts exhausted")

// ErrBudgetExhausted wraps the last error when a retry was due but the
// budget refused it.
var ErrBudgetExhausted = errors.New("retry: budget exhausted")

// AttemptFunc makes one attempt (0 for the first). It returns nil on
// success, or the error and whether it is worth retrying (see
// Policy.RetryError, Policy.RetryStatus and Retryable). ctx carries the
// per-try timeout.
type AttemptFunc func(ctx context.Context, attempt int) (retryable bool, err error)

// Do calls fn until it succeeds, returns a non-retryable error, runs out of
// p.Attempts, or budget refuses a retry (a nil budget allows every retry).
// Each attempt runs under p.PerTryTimeout; an attempt that ran out of it
// (while ctx did not) is retryable when p retries timeouts, whatever fn
// says. Between attempts Do sleeps Backoff with full jitter, and returns
// early when ctx is done.
//
// The error is fn's last error, unchanged when it was not retryable,
// wrapped with ErrAttemptsExhausted or ErrBudgetExhausted otherwise, or
// ctx's error joined with it.
func Do(ctx context.Context, p Policy, budget *Budget, fn AttemptFunc) error {
	return runner{now: time.Now, rnd: rand.Int64N, sleep: ctxtime.Sleep}.do(ctx, p, budget, fn)
}

// runner holds the seams of Do: the clock, the jitter source and the sleep.
type runner struct {
	now   func() time.Time
	rnd   func(int64) int64
	sleep func(ctx context.Context, d time.Duration) error
}

func (r runner) do(ctx context.Context, p Policy, budget *Budget, fn AttemptFunc) error {
	p = p.WithDefaults()
	retryTimeouts := p.Conditions()&Timeout != 0
	budget.Deposit(r.now())
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if p.PerTryTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, p.PerTryTimeout)
		}
		retryable, err := fn(actx, attempt)
		perTryExpired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if perTryExpired && retryTimeouts {
			retryable = true
		}
		if !retryable {
			return err
		}
		if attempt+1 >= p.Attempts {
			return fmt.Errorf("%w after %d attempts: %w", ErrAttemptsExhausted, attempt+1, err)
		}
		if !budget.TryWithdraw(r.now()) {
			return fmt.Errorf("%w after %d attempts: %w", ErrBudgetExhausted, attempt+1, err)
		}
		if serr := r.sleep(ctx, p.Backoff(attempt, r.rnd)); serr != nil {
			return errors.Join(serr, err)
		}
	}
}
