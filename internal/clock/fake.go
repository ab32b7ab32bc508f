package clock

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock for tests whose time moves only when Advance moves it. It
// is safe for concurrent use, but Advance must not be called from a timer's
// callback.
//
// Timers fire inside Advance, in the order they come due (those due at the
// same time in the order they were armed), and Now reads each timer's due
// time while it fires. An AfterFunc callback runs on Advance's goroutine
// before the next timer fires, so it may rearm itself or arm others; a
// channel timer's value is sent without blocking into a one-slot buffer,
// which the receiver reads on its own goroutine. A timer armed for zero or
// less fires at the next Advance, even Advance(0).
//
// A test that must wait for the code under test to arm a timer before it
// advances uses Waiting; Pending tells what is armed.
type Fake struct {
	adv sync.Mutex // serialises Advance

	mu      sync.Mutex
	now     time.Time
	seq     uint64       // arming order
	armed   []*fakeTimer // unordered
	waiters []fakeWaiter
}

type fakeWaiter struct {
	n    int
	done chan struct{}
}

// fakeTimer is a timer, ticker or AfterFunc of a Fake. Its fields are
// guarded by the Fake's mu.
type fakeTimer struct {
	f      *Fake
	due    time.Time
	seq    uint64
	period time.Duration  // tickers
	fn     func()         // AfterFunc
	c      chan time.Time // timers and tickers: capacity 1
	on     bool           // in f.armed
}

// NewFake returns a Fake whose Now is start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the Fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker implements Clock. It panics if d is not positive, as
// time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, period: d, c: make(chan time.Time, 1)}
	t.Reset(d)
	return fakeTicker{t}
}

// AfterFunc implements Clock. f runs on the goroutine that calls Advance.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the Fake's time forward by d, firing every timer that
// comes due on the way, in order, including timers armed by the callbacks
// it runs. It panics if d is negative.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Advance with a negative duration")
	}
	f.adv.Lock()
	defer f.adv.Unlock()
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		t := f.nextLocked(end)
		if t == nil {
			break
		}
		if t.due.After(f.now) {
			f.now = t.due
		}
		if t.period > 0 {
			t.due = t.due.Add(t.period)
			t.seq = f.nextSeqLocked()
		} else {
			f.disarmLocked(t)
		}
		if t.c != nil {
			select {
			case t.c <- f.now:
			default: // the last value is still unread: this one is missed
			}
		}
		if fn := t.fn; fn != nil {
			f.mu.Unlock()
			fn()
			f.mu.Lock()
		}
	}
	if end.After(f.now) {
		f.now = end
	}
	f.mu.Unlock()
}

// Pending returns how long from now each armed timer, ticker and
// AfterFunc is due, soonest first (zero for one that fires at the next
// Advance).
func (f *Fake) Pending() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := slices.Clone(f.armed)
	slices.SortFunc(ts, compareTimers)
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = max(t.due.Sub(f.now), 0)
	}
	return out
}

// Waiting returns a channel that is closed once at least n timers, tickers
// and AfterFuncs are armed: the way for a test to know that the code under
// test has armed what the next Advance should fire.
func (f *Fake) Waiting(n int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := fakeWaiter{n: n, done: make(chan struct{})}
	if len(f.armed) >= n {
		close(w.done)
	} else {
		f.waiters = append(f.waiters, w)
	}
	return w.done
}

// nextLocked returns the armed timer that fires first, if it is due by end.
func (f *Fake) nextLocked(end time.Time) *fakeTimer {
	var next *fakeTimer
	for _, t := range f.armed {
		if next == nil || compareTimers(t, next) < 0 {
			next = t
		}
	}
	if next == nil || next.due.After(end) {
		return nil
	}
	return next
}

func compareTimers(a, b *fakeTimer) int {
	if c := a.due.Compare(b.due); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

func (f *Fake) nextSeqLocked() uint64 {
	f.seq++
	return f.seq
}

func (f *Fake) armLocked(t *fakeTimer, d time.Duration) {
	t.due = f.now.Add(d)
	t.seq = f.nextSeqLocked()
	if !t.on {
		t.on = true
		f.armed = append(f.armed, t)
	}
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if len(f.armed) >= w.n {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

func (f *Fake) disarmLocked(t *fakeTimer) {
	if !t.on {
		return
	}
	t.on = false
	i := slices.Index(f.armed, t)
	f.armed = slices.Delete(f.armed, i, i+1)
}

// drainLocked empties t's channel, reporting whether it held a value.
func (t *fakeTimer) drainLocked() bool {
	select {
	case <-t.c:
		return true
	default:
		return false
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.on
	if t.c != nil && t.drainLocked() {
		was = true
	}
	t.f.armLocked(t, d)
	return was
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.on
	t.f.disarmLocked(t)
	if t.c != nil && t.drainLocked() {
		was = true
	}
	return was
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }
func (k fakeTicker) Stop()               { k.t.Stop() }
