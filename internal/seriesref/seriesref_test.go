package seriesref

import (
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func TestDeletedOnlyAfterTheLastHolderAndTheGrace(t *testing.T) {
	var mu sync.Mutex
	var deleted []string
	r := New(time.Hour, func(k string) {
		mu.Lock()
		deleted = append(deleted, k)
		mu.Unlock()
	})
	r.Hold("a", "a", "b")
	r.Release("a")
	if r.Pending() != 0 {
		t.Fatal("a key with a holder left is pending deletion")
	}
	r.Release("a", "b")
	if r.Pending() != 2 {
		t.Fatalf("pending = %d after the last holders let go, want 2", r.Pending())
	}
	r.Hold("b") // taken back within the grace
	if r.Pending() != 1 {
		t.Fatalf("pending = %d after b was taken back, want 1", r.Pending())
	}
	r.SetGrace(0)
	r.Release("b")
	testutil.WaitFor(t, 5*time.Second, "b's deletion", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deleted) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if deleted[0] != "b" || r.Pending() != 1 {
		t.Fatalf("deleted %q with %d pending, want [b] and a still waiting out its hour", deleted, r.Pending())
	}
}

// Hold and Release racing the timers: every key ends deleted exactly when
// its holds and releases balance.
func TestConcurrentHoldsAndReleasesBalance(t *testing.T) {
	var mu sync.Mutex
	deletes := map[int]int{}
	r := New(time.Microsecond, func(k int) {
		mu.Lock()
		deletes[k]++
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := (g + i) % 4
				r.Hold(k)
				r.Release(k)
			}
		})
	}
	wg.Wait()
	r.Hold(0)
	testutil.WaitFor(t, 5*time.Second, "the grace of keys 1-3 to pass", func() bool { return r.Pending() == 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n[0] != 1 || len(r.n) != 1 {
		t.Fatalf("holders %v, want only key 0 with 1", r.n)
	}
}
