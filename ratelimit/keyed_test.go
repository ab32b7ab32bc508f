package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newTestKeyed(t *testing.T, c Config) *Keyed {
	t.Helper()
	k, err := NewKeyed(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKeyedMemoryIsBoundedUnderAFloodOfKeys: a million distinct keys leave
// at most max_keys behind, and a key in steady use keeps its state through
// the flood.
func TestKeyedMemoryIsBoundedUnderAFloodOfKeys(t *testing.T) {
	k := newTestKeyed(t, Config{Rate: "1/h", Burst: 1, Key: "client_ip"})
	if got := k.AllowN("victim", t0, 1); !got.Allowed {
		t.Fatal("victim's first request rejected")
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var buf []byte
	for i := range 1_000_000 {
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		k.AllowN(string(buf), t0, 1)
		if i%1000 == 0 && k.AllowN("victim", t0, 1).Allowed {
			t.Fatalf("after %d flood keys the victim's exhausted bucket was forgotten", i)
		}
		if i%100_000 == 0 && k.Len() > DefaultMaxKeys {
			t.Fatalf("after %d keys Len = %d > max_keys %d", i, k.Len(), DefaultMaxKeys)
		}
	}
	if n := k.Len(); n != DefaultMaxKeys {
		t.Fatalf("after 1M keys Len = %d, want max_keys %d", n, DefaultMaxKeys)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap for %d keys: %.1f MiB", k.Len(), float64(grown)/(1<<20))
	if grown > 64<<20 {
		t.Fatalf("heap grew by %d MiB for 100k keys, want under 64 MiB", grown>>20)
	}
}

func TestKeyedDropsIdleKeys(t *testing.T) {
	// 10/s with burst 5: a key is back to full 500ms after using 5.
	k := newTestKeyed(t, Config{Rate: "10/s", Burst: 5, Key: "header:X-User"})
	for i := range 100 {
		k.AllowN(fmt.Sprint("user-", i), t0, 5)
	}
	k.AllowN("busy", at(400*ms), 5)
	if n := k.Sweep(at(499 * ms)); n != 0 {
		t.Fatalf("Sweep before refill dropped %d keys, want 0", n)
	}
	if n := k.Sweep(at(500 * ms)); n != 100 {
		t.Fatalf("Sweep at full refill dropped %d keys, want the 100 idle ones", n)
	}
	if n := k.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1 (busy, still refilling)", n)
	}
	// A dropped key decides exactly like the old limiter would have: full.
	if got := admitted(keyedAt{k, "user-1"}, at(500*ms), 9); got != 5 {
		t.Fatalf("user-1 after expiry admitted %d, want 5", got)
	}
	if got := admitted(keyedAt{k, "busy"}, at(500*ms), 9); got != 1 {
		t.Fatalf("busy admitted %d, want 1 (its state was kept)", got)
	}
}

func TestKeyedIdleMeansEquivalentToNewForEveryAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		idle time.Duration // after one request at t0
	}{
		{Config{Rate: "10/s", Burst: 3}, 100 * ms},
		{Config{Algorithm: "leaky_bucket", Rate: "10/s", Queue: 3}, 100 * ms},
		{Config{Algorithm: "fixed_window", Rate: "5/s"}, time.Second},   // t0 starts a window
		{Config{Algorithm: "sliding_window", Rate: "5/s"}, time.Second}, // log: the event leaves the window
		{Config{Algorithm: "sliding_window", Rate: "5/s", Variant: "counter"}, 2 * time.Second},
	} {
		tc.cfg.Key = "route"
		k := newTestKeyed(t, tc.cfg)
		k.AllowN("r", t0, 1)
		if n := k.Sweep(at(tc.idle - time.Nanosecond)); n != 0 {
			t.Errorf("%s: swept %d keys before %v", tc.cfg.Algorithm, n, tc.idle)
		}
		if n := k.Sweep(at(tc.idle)); n != 1 {
			t.Errorf("%s: swept %d keys at %v, want 1", tc.cfg.Algorithm, n, tc.idle)
		}
	}
}

func TestKeyedLeakyBucketDelays(t *testing.T) {
	k := newTestKeyed(t, Config{Algorithm: "leaky_bucket", Rate: "100/s", Queue: 10, Key: "client_ip"})
	for i := range 11 {
		res := k.ReserveN("203.0.113.5", t0, 1)
		if !res.Allowed || res.Delay != time.Duration(i)*10*ms {
			t.Fatalf("arrival %d: %+v, want a delay of %v", i, res, time.Duration(i)*10*ms)
		}
	}
	if res := k.ReserveN("203.0.113.5", t0, 1); res.Allowed {
		t.Fatal("the 12th arrival was admitted into a full queue")
	}
	if res := k.ReserveN("198.51.100.7", t0, 1); !res.Allowed || res.Delay != 0 {
		t.Fatalf("another client: %+v, want an immediate admission", res)
	}
}

func TestKeyedDropsIdleKeysLazilyAsNewOnesArrive(t *testing.T) {
	k := newTestKeyed(t, Config{Rate: "10/s", Burst: 1, Key: "path"})
	for i := range 1000 {
		k.AllowN(fmt.Sprint("/old/", i), t0, 1)
	}
	for i := range 4000 {
		k.AllowN(fmt.Sprint("/new/", i), at(time.Second), 1)
	}
	t.Logf("Len after 4000 new keys: %d", k.Len())
	if n := k.Len(); n > 4000+50 {
		t.Fatalf("Len = %d: of 1000 idle keys %d are left, want nearly none", n, n-4000)
	}
}

func TestKeyedSmallMaxKeysIsExact(t *testing.T) {
	k := newTestKeyed(t, Config{Algorithm: "fixed_window", Rate: "1/m", Key: "route", MaxKeys: 3})
	for i := range 10 {
		k.AllowN(strconv.Itoa(i), t0, 1)
		if n := k.Len(); n > 3 {
			t.Fatalf("Len = %d > 3 after %d keys", n, i+1)
		}
	}
}

func TestKeyedLongKeysAreDistinct(t *testing.T) {
	k := newTestKeyed(t, Config{Rate: "1/h", Burst: 1, Key: "header:Authorization"})
	long := "Bearer " + strings.Repeat("x", 1000)
	other := "Bearer " + strings.Repeat("x", 999) + "y"
	if !k.AllowN(long, t0, 1).Allowed || k.AllowN(long, t0, 1).Allowed {
		t.Fatal("a long key: want allowed, then rejected")
	}
	if !k.AllowN(other, t0, 1).Allowed {
		t.Fatal("a different long key shares the first one's limiter")
	}
}

func TestKeyedAllowNOnAnExistingKeyDoesNotAllocate(t *testing.T) {
	k := newTestKeyed(t, Config{Rate: "1000/s", Burst: 10, Key: "client_ip"})
	k.AllowN("203.0.113.5", t0, 1)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(ms)
		k.AllowN("203.0.113.5", now, 1)
	}); n != 0 {
		t.Fatalf("%v allocations per AllowN, want 0", n)
	}
}

// keyedAt adapts one key of a Keyed to Limiter for the helpers.
type keyedAt struct {
	k   *Keyed
	key string
}

func (a keyedAt) AllowN(now time.Time, n int) Result   { return a.k.AllowN(a.key, now, n) }
func (a keyedAt) ReserveN(now time.Time, n int) Result { return a.k.ReserveN(a.key, now, n) }

// TestShardTableKeepsEveryEntryReachable exercises the open-addressing
// table directly against a map: random inserts, deletions (with backward
// shift), evictions and growth, small ids so that probe runs collide and
// wrap around.
func TestShardTableKeepsEveryEntryReachable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := &shard[int64]{cap: 200}
	model := map[[2]uint64]int64{}
	never := func(int64) bool { return false }
	for step := range 200_000 {
		id := [2]uint64{1, uint64(rng.IntN(400))<<1 | 1}
		switch i, ok := s.find(id); {
		case ok && rng.IntN(3) == 0:
			s.delete(i)
			delete(model, id)
		case ok:
			if s.slots[i].v != model[id] {
				t.Fatalf("step %d: value %d, want %d", step, s.slots[i].v, model[id])
			}
		default:
			before := s.n
			i := s.insert(id, int64(step), never)
			s.slots[i].ref = rng.IntN(2) == 0
			model[id] = int64(step)
			if before == s.cap {
				// One entry was evicted: find which.
				for mid := range model {
					if _, ok := s.find(mid); !ok {
						delete(model, mid)
					}
				}
			}
		}
		if s.n != len(model) || s.n > s.cap {
			t.Fatalf("step %d: n = %d, model %d, cap %d", step, s.n, len(model), s.cap)
		}
		if step%1000 == 0 {
			for mid, v := range model {
				if i, ok := s.find(mid); !ok || s.slots[i].v != v {
					t.Fatalf("step %d: entry %v lost or wrong", step, mid)
				}
			}
		}
	}
	if 8*s.n > 7*len(s.slots) {
		t.Fatalf("load %d/%d above 7/8", s.n, len(s.slots))
	}
}

// TestKeyedBucketsDecideLikeTheSingleLimiters: the keyed table runs the
// buckets' step functions on slot state, the single limiters on atomics;
// on the same random traffic they must return the same Results.
func TestKeyedBucketsDecideLikeTheSingleLimiters(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cfg := range []Config{
		{Rate: "7/s", Burst: 4, Key: "route"},
		{Algorithm: "leaky_bucket", Rate: "7/s", Queue: 4, MaxWait: 400 * ms, Key: "route"},
	} {
		k := newTestKeyed(t, cfg)
		single, _ := New(cfg)
		now := t0
		for i := range 5000 {
			now = now.Add(time.Duration(rng.IntN(int(300 * ms))))
			n := rng.IntN(4)
			got, want := k.AllowN("r", now, n), single.AllowN(now, n)
			if rng.IntN(2) == 0 {
				got, want = k.ReserveN("r", now, n), single.ReserveN(now, n)
			}
			if got != want {
				t.Fatalf("%s step %d (n=%d): keyed %+v, single %+v", cfg.Algorithm, i, n, got, want)
			}
		}
	}
}
