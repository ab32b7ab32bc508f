package retry

import (
	"sync"
	"testing"
	"time"
)

// t0 is aligned to the budget's one-second slots, so that a simulation over
// [t0, t0+10s) stays within one window.
var t0 = time.Unix(1_800_000_000, 0)

func TestBudgetBoundsAttemptsWhenEveryCallFails(t *testing.T) {
	p := Policy{}.WithDefaults() // attempts 3, ratio 0.2, window 10s, floor 10/s
	b := NewBudget(p)
	const perSecond = 1000
	requests, attempts := 0, 0
	for i := range 10 * perSecond {
		now := t0.Add(time.Duration(i) * time.Second / perSecond)
		b.Deposit(now)
		requests++
		attempts++ // the first try, which fails
		for retry := 1; retry < p.Attempts && b.TryWithdraw(now); retry++ {
			attempts++ // fails too
		}
	}
	// retries <= ratio × requests + floor × window = 0.2×10000 + 10×10.
	const wantRetries = 2100
	if attempts-requests != wantRetries {
		t.Fatalf("%d requests made %d retries, want exactly the budget 0.2×%d + 10/s×10s = %d",
			requests, attempts-requests, requests, wantRetries)
	}
	if bound := int(1.2*float64(requests)) + 100; attempts > bound {
		t.Fatalf("attempts = %d, above (1 + 0.2) × %d requests + 100 = %d", attempts, requests, bound)
	}
	if r, w := b.Counts(t0.Add(10*time.Second - time.Nanosecond)); r != 10000 || w != 2100 {
		t.Fatalf("Counts at the end of the window = %d requests, %d retries; want 10000, 2100", r, w)
	}
}

func TestBudgetFloorLetsQuietRoutesRetry(t *testing.T) {
	b := NewBudget(Policy{MinRetriesPerSecond: 1, BudgetWindow: 10 * time.Second})
	// No requests at all: the floor alone allows 1/s × 10s = 10 retries.
	for i := range 10 {
		if !b.TryWithdraw(t0) {
			t.Fatalf("retry %d refused; the floor allows 10 per window", i+1)
		}
	}
	if b.TryWithdraw(t0) {
		t.Fatal("11th retry allowed; the floor is 10 per window")
	}
}

func TestBudgetForgetsWhatLeftTheWindow(t *testing.T) {
	b := NewBudget(Policy{MinRetriesPerSecond: 1, BudgetWindow: 10 * time.Second})
	for range 10 {
		b.TryWithdraw(t0)
	}
	if b.TryWithdraw(t0.Add(9 * time.Second)) {
		t.Fatal("retry allowed at +9s: the 10 retries at t0 are still in the window")
	}
	if !b.TryWithdraw(t0.Add(10 * time.Second)) {
		t.Fatal("retry refused at +10s: the retries at t0 have left the 10s window")
	}
	if r, w := b.Counts(t0.Add(time.Hour)); r != 0 || w != 0 {
		t.Fatalf("Counts an hour later = %d, %d; want 0, 0", r, w)
	}
}

func TestBudgetTimeGoingBackwardsCountsInNewestSlot(t *testing.T) {
	b := NewBudget(Policy{})
	b.Deposit(t0.Add(5 * time.Second))
	b.Deposit(t0)
	if r, _ := b.Counts(t0.Add(5 * time.Second)); r != 2 {
		t.Fatalf("Counts = %d requests, want 2", r)
	}
}

func TestNilBudgetAllowsEveryRetry(t *testing.T) {
	var b *Budget
	b.Deposit(t0)
	if !b.TryWithdraw(t0) {
		t.Fatal("a nil budget must allow every retry")
	}
}

func TestBudgetConcurrentUseKeepsTheBound(t *testing.T) {
	b := NewBudget(Policy{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	retries := 0
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := range 2500 {
				now := t0.Add(time.Duration(g*2500+i) * time.Millisecond / 4)
				b.Deposit(now)
				if b.TryWithdraw(now) {
					n++
				}
			}
			mu.Lock()
			retries += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	// 10000 requests in [t0, t0+6.25s): at most 0.2×10000 + 100 retries.
	if retries > 2100 {
		t.Fatalf("%d retries under concurrency, above the budget of 2100", retries)
	}
}

func TestBudgetDoesNotAllocate(t *testing.T) {
	b := NewBudget(Policy{})
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		b.Deposit(now)
		b.TryWithdraw(now)
	})
	if allocs != 0 {
		t.Fatalf("Deposit + TryWithdraw allocate %v times per call, want 0", allocs)
	}
}

func BenchmarkBudget(b *testing.B) {
	bud := NewBudget(Policy{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Microsecond)
			bud.Deposit(now)
			bud.TryWithdraw(now)
		}
	})
}
