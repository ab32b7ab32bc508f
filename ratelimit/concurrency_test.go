package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func newTestConcurrency(t *testing.T, c ConcurrencyConfig) *Concurrency {
	t.Helper()
	l, err := NewConcurrency(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConcurrencyCapHoldsUnderManyGoroutines(t *testing.T) {
	const limit = 4
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: limit, Queue: 64})
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				release, err := l.Acquire(context.Background())
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				n := inside.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				inside.Add(-1)
				release()
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit || p < 1 {
		t.Fatalf("peak in flight %d, want 1..%d", p, limit)
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("after all released: in flight %d, waiting %d; want 0, 0", l.InFlight(), l.Waiting())
	}
}

func TestConcurrencyQueueTimesOut(t *testing.T) {
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: 1, Queue: 1, MaxWait: 20 * time.Millisecond})
	release, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("second Acquire: %v, want ErrQueueTimeout", err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("gave up after %v, want max_wait 20ms", waited)
	}
	if l.Waiting() != 0 {
		t.Fatalf("a timed-out waiter stayed in the queue")
	}
	release()
	if _, ok := l.TryAcquire(); !ok {
		t.Fatal("the slot was not returned")
	}
}

func TestConcurrencyRejectsWhenQueueIsFullAndServesInOrder(t *testing.T) {
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: 1, Queue: 3})
	release, _ := l.Acquire(context.Background())
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			r, err := l.Acquire(context.Background())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			r()
		}()
		testutil.WaitFor(t, 5*time.Second, "the waiter to queue", func() bool { return l.Waiting() == i+1 })
	}
	if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrConcurrencyLimited) {
		t.Fatalf("Acquire with a full queue: %v, want ErrConcurrencyLimited", err)
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire jumped the queue")
	}
	release()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d got the slot, want %d (FIFO)", got, want)
		}
	}
}

func TestConcurrencyWaiterLeavesWhenContextEnds(t *testing.T) {
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: 1, Queue: 1})
	release, _ := l.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Acquire(ctx)
		done <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "the waiter to queue", func() bool { return l.Waiting() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel: %v, want context.Canceled", err)
	}
	release()
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d after everything left, want 0", l.InFlight())
	}
}

func TestConcurrencyFastPathDoesNotAllocate(t *testing.T) {
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: 10})
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		release, _ := l.Acquire(ctx)
		release()
	}); n != 0 {
		t.Fatalf("%v allocations per Acquire+release, want 0", n)
	}
}

func TestConcurrencyReleaseTooOftenPanics(t *testing.T) {
	l := newTestConcurrency(t, ConcurrencyConfig{MaxInFlight: 1})
	release, _ := l.Acquire(context.Background())
	release()
	defer func() {
		if recover() == nil {
			t.Fatal("a second release did not panic")
		}
	}()
	release()
}

func TestConcurrencyConfigErrors(t *testing.T) {
	for c, want := range map[ConcurrencyConfig]string{
		{MaxInFlight: 0, Queue: -1}:             "max_in_flight: must be at least 1, got 0\nqueue: must not be negative, got -1",
		{MaxInFlight: 1, MaxWait: time.Second}:  "max_wait: needs a queue",
		{MaxInFlight: 1, Queue: 1, MaxWait: -1}: "max_wait: must not be negative, got -1ns",
	} {
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("Validate(%+v):\n got %v\nwant %s", c, err, want)
		}
	}
}
