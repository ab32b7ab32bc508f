package clock

import (
	"context"
	"time"
)

// Sleep waits for d on a timer, or until ctx ends, in which case it returns
// ctx's error. A d of zero or less returns at once (with ctx's error, if
// any). It is SleepOn with Real.
func Sleep(ctx context.Context, d time.Duration) error { return SleepOn(ctx, Real, d) }

// SleepOn is Sleep on a timer of c: a loop that waits through SleepOn on
// its own Clock waits on a Fake in its tests, which see the wait armed
// (Fake.Waiting, Fake.Pending) and end it with Advance. A d of zero or
// less arms no timer.
func SleepOn(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
