// Package ctxtime is what is left of the context-aware sleep that moved to
// internal/clock. Only retry/do.go still imports it, and retry.Do is being
// deleted; remove this package with it. New code uses clock.Sleep.
package ctxtime

import (
	"context"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Sleep is clock.Sleep, for retry/do.go until it goes.
func Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }
