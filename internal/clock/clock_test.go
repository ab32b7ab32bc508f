package clock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// since formats f's time as an offset from t0, for readable failures.
func since(f *Fake) time.Duration { return f.Now().Sub(t0) }

func received(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeFiresTimersInOrderOnAdvance(t *testing.T) {
	f := NewFake(t0)
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, name+"@"+since(f).String()) }
	}
	f.AfterFunc(3*time.Second, at("c"))
	f.AfterFunc(time.Second, at("a"))
	f.AfterFunc(2*time.Second, at("b1"))
	f.AfterFunc(2*time.Second, at("b2")) // same due time: armed later, fires later
	ch := f.NewTimer(2 * time.Second)

	f.Advance(2500 * time.Millisecond)
	if want := []string{"a@1s", "b1@2s", "b2@2s"}; !slices.Equal(fired, want) {
		t.Fatalf("after Advance(2.5s) fired %v, want %v (in due order, Now at each due time)", fired, want)
	}
	if v, ok := received(ch.C()); !ok || !v.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("channel timer due at 2s: got %v (ok %v), want the due time %v", v, ok, t0.Add(2*time.Second))
	}
	if got := since(f); got != 2500*time.Millisecond {
		t.Fatalf("Now is t0+%v after Advance(2.5s), want t0+2.5s", got)
	}
	if got := f.Pending(); !slices.Equal(got, []time.Duration{500 * time.Millisecond}) {
		t.Fatalf("Pending %v, want [500ms] (only c is left)", got)
	}
	f.Advance(499 * time.Millisecond)
	if len(fired) != 3 {
		t.Fatalf("c fired before its due time: %v", fired)
	}
	f.Advance(time.Millisecond)
	if want := "c@3s"; len(fired) != 4 || fired[3] != want {
		t.Fatalf("fired %v, want %s last", fired, want)
	}
	if got := f.Pending(); len(got) != 0 {
		t.Fatalf("Pending %v after every timer fired, want none", got)
	}
}

func TestFakeCallbackRearmsWithinOneAdvance(t *testing.T) {
	f := NewFake(t0)
	var at []time.Duration
	var tm Timer
	tm = f.AfterFunc(time.Second, func() {
		at = append(at, since(f))
		tm.Reset(time.Second)
	})
	f.Advance(3500 * time.Millisecond)
	if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(at, want) {
		t.Fatalf("a callback rearming itself every 1s fired at %v over 3.5s, want %v", at, want)
	}
	if !tm.Stop() {
		t.Fatal("Stop of the rearmed timer reported it was not armed")
	}
}

func TestFakeZeroTimerFiresAtTheNextAdvance(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(0)
	if _, ok := received(tm.C()); ok {
		t.Fatal("a zero timer fired before any Advance")
	}
	f.Advance(0)
	if v, ok := received(tm.C()); !ok || !v.Equal(t0) {
		t.Fatalf("Advance(0): got %v (ok %v), want t0", v, ok)
	}
}

func TestFakeTimerStop(t *testing.T) {
	f := NewFake(t0)
	calls := 0
	fn := f.AfterFunc(time.Second, func() { calls++ })
	if !fn.Stop() {
		t.Error("Stop of an armed AfterFunc returned false")
	}
	if fn.Stop() {
		t.Error("a second Stop returned true")
	}
	f.Advance(time.Hour)
	if calls != 0 {
		t.Errorf("a stopped AfterFunc ran %d times", calls)
	}

	// A fired timer whose value was not received: Stop drains it, so no
	// stale value arrives later, and reports it stopped something.
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second)
	if !tm.Stop() {
		t.Error("Stop of a fired, unreceived timer returned false")
	}
	if v, ok := received(tm.C()); ok {
		t.Errorf("received %v after Stop", v)
	}
	// Fired and received: nothing to stop.
	tm = f.NewTimer(time.Second)
	f.Advance(time.Second)
	<-tm.C()
	if tm.Stop() {
		t.Error("Stop of a fired and received timer returned true")
	}
}

func TestFakeTimerReset(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Reset(3 * time.Second) {
		t.Error("Reset of an armed timer returned false")
	}
	f.Advance(2 * time.Second)
	if _, ok := received(tm.C()); ok {
		t.Fatal("the timer fired at its old due time after Reset")
	}
	f.Advance(time.Second)
	if v, ok := received(tm.C()); !ok || !v.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("got %v (ok %v), want the new due time t0+3s", v, ok)
	}
	// Reset measures from the Fake's now, and drops an unreceived value.
	f.Advance(time.Second)
	tm.Reset(time.Second)
	f.Advance(time.Second)
	if tm.Reset(time.Second) != true {
		t.Error("Reset of a fired, unreceived timer returned false")
	}
	if v, ok := received(tm.C()); ok {
		t.Fatalf("received the stale value %v after Reset", v)
	}
	f.Advance(time.Second)
	if v, ok := received(tm.C()); !ok || !v.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("got %v (ok %v), want t0+6s", v, ok)
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(t0)
	tk := f.NewTicker(time.Second)
	f.Advance(time.Second)
	if v, ok := received(tk.C()); !ok || !v.Equal(t0.Add(time.Second)) {
		t.Fatalf("first tick: %v (ok %v), want t0+1s", v, ok)
	}
	// A receiver that does not keep up misses ticks: one stays buffered.
	f.Advance(3 * time.Second)
	if v, ok := received(tk.C()); !ok || !v.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after 3 unread ticks got %v (ok %v), want the first of them, t0+2s", v, ok)
	}
	if _, ok := received(tk.C()); ok {
		t.Fatal("more than one tick buffered")
	}
	if got := f.Pending(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Fatalf("Pending %v, want the ticker 1s out", got)
	}
	f.Advance(time.Second)
	tk.Stop()
	if _, ok := received(tk.C()); ok {
		t.Fatal("a tick was received after Stop")
	}
	if got := f.Pending(); len(got) != 0 {
		t.Fatalf("Pending %v after Stop, want none", got)
	}
}

func TestFakeWaiting(t *testing.T) {
	f := NewFake(t0)
	select {
	case <-f.Waiting(0):
	default:
		t.Fatal("Waiting(0) is not closed at once")
	}
	w := f.Waiting(2)
	f.NewTimer(time.Second)
	select {
	case <-w:
		t.Fatal("Waiting(2) closed with one timer armed")
	default:
	}
	go f.AfterFunc(time.Minute, func() {})
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("Waiting(2) not closed within 5s of a second timer being armed")
	}
}

func TestNanos(t *testing.T) {
	now := time.Now()
	if got := Nanos(now.Add(time.Second)) - Nanos(now); got != int64(time.Second) {
		t.Errorf("Nanos difference over 1s: %d", got)
	}
	if n := NowNanos(Real); n < 0 || n < Nanos(now) {
		t.Errorf("NowNanos(Real) = %d, before Nanos of an earlier time.Now (%d)", n, Nanos(now))
	}
	f := NewFake(t0)
	f.Advance(time.Minute)
	if got, want := NowNanos(f), Nanos(t0.Add(time.Minute)); got != want {
		t.Errorf("NowNanos(fake) = %d, want Nanos(fake.Now()) = %d", got, want)
	}
}

func TestWithNow(t *testing.T) {
	f := NewFake(t0)
	c := WithNow(f, func() time.Time { return t0.Add(time.Hour) })
	if got := c.Now(); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("Now %v, want the func's t0+1h", got)
	}
	tm := c.NewTimer(time.Second)
	f.Advance(time.Second)
	if _, ok := received(tm.C()); !ok {
		t.Error("a timer of WithNow(fake) did not fire on the fake's Advance")
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a canceled context = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(0) on a canceled context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), -time.Second); err != nil {
		t.Errorf("Sleep(-1s) = %v, want nil at once", err)
	}
}

func TestSleepOnWaitsForTheClock(t *testing.T) {
	f := NewFake(t0)
	done := make(chan error, 1)
	go func() { done <- SleepOn(context.Background(), f, time.Second) }()
	select {
	case <-f.Waiting(1):
	case <-time.After(5 * time.Second):
		t.Fatal("SleepOn(1s) armed no timer on the Fake within 5s")
	}
	if got := f.Pending(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Fatalf("Pending %v while SleepOn(1s) waits, want [1s]", got)
	}
	f.Advance(time.Second - time.Nanosecond)
	if got := f.Pending(); !slices.Equal(got, []time.Duration{time.Nanosecond}) {
		t.Fatalf("Pending %v 1ns before the end of the sleep, want [1ns]: it must still wait", got)
	}
	f.Advance(time.Nanosecond)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SleepOn(1s) after Advance(1s) = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SleepOn(1s) did not return within 5s of the Fake reaching its end")
	}
}

func TestSleepOnEndsWithItsContext(t *testing.T) {
	f := NewFake(t0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- SleepOn(ctx, f, time.Hour) }()
	select {
	case <-f.Waiting(1):
	case <-time.After(5 * time.Second):
		t.Fatal("SleepOn(1h) armed no timer on the Fake within 5s")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("SleepOn canceled = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SleepOn did not return within 5s of its context's cancel")
	}
	if got := f.Pending(); len(got) != 0 {
		t.Fatalf("Pending %v after a canceled SleepOn returned, want none: it must stop its timer", got)
	}
	if since(f) != 0 {
		t.Fatalf("the Fake moved to t0+%v; nothing advanced it", since(f))
	}
}

func TestSleepOnWithoutAWaitArmsNoTimer(t *testing.T) {
	f := NewFake(t0)
	if err := SleepOn(context.Background(), f, 0); err != nil {
		t.Errorf("SleepOn(0) = %v, want nil at once", err)
	}
	if err := SleepOn(context.Background(), f, -time.Second); err != nil {
		t.Errorf("SleepOn(-1s) = %v, want nil at once", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := SleepOn(ctx, f, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("SleepOn(0) on a canceled context = %v, want context.Canceled", err)
	}
	if err := SleepOn(ctx, f, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("SleepOn(1h) on a canceled context = %v, want context.Canceled", err)
	}
	if got := f.Pending(); len(got) != 0 {
		t.Errorf("Pending %v, want none: no wait arms no timer, and a canceled one stops its own", got)
	}
}
