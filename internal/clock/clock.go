// Package clock is switchboard's one way of getting at time, for the
// library packages and the servers alike.
//
// Hot paths take time as a parameter (AllowN(now, n), Done(outcome, now)),
// and a thin wrapper reads the clock; nothing here is needed for those.
// What remains is code that waits: timers, tickers and deferred calls. It
// reads time and arms timers through a Clock, which is Real in production
// and a Fake in tests, where Advance fires due timers in order without
// sleeping. A type takes its Clock through an unexported option or field:
// the Clock is a test seam, not a knob.
//
// The package also holds the process's one epoch (Nanos, NowNanos), for
// state kept as int64 nanoseconds, and the context-aware Sleep (on Real)
// and SleepOn (on a given Clock).
package clock

import "time"

// Clock reads the time and arms timers. Real and *Fake implement it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a Timer that sends the time on its channel once d
	// has passed.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a Ticker that sends the time on its channel every
	// d; d must be positive. A slow receiver misses ticks, as with
	// time.Ticker.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f once d has passed, unless the returned Timer is
	// stopped first. The Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a time.Timer behind an interface, with Go 1.23 semantics: after
// Stop or Reset returns, no value sent before the call is received.
type Timer interface {
	// C returns the channel the time is sent on; nil for AfterFunc.
	C() <-chan time.Time
	// Reset rearms the timer to fire d from now. It reports whether the
	// timer was armed (or its value not yet received).
	Reset(d time.Duration) bool
	// Stop disarms the timer. It reports whether the call stopped it, that
	// is whether it had not fired yet (or its value was not yet received).
	Stop() bool
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	// C returns the channel the ticks are sent on.
	C() <-chan time.Time
	// Stop turns the ticker off; no tick is sent after it returns.
	Stop()
}

// Real is the Clock of the time package: time.Now, time.NewTimer,
// time.NewTicker and time.AfterFunc.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
func (r realTimer) Stop() bool                 { return r.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// WithNow returns c with its Now replaced by now; timers still run on c.
// It serves exported options that have always taken a func() time.Time
// (health.WithDetectorClock), so that the type behind them keeps one Clock.
func WithNow(c Clock, now func() time.Time) Clock { return withNow{c, now} }

type withNow struct {
	Clock
	now func() time.Time
}

func (w withNow) Now() time.Time { return w.now() }
