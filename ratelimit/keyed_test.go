package ratelimit

import (
	"fmt"
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

func TestKeyedLongKeysAreHashed(t *testing.T) {
	k := newTestKeyed(t, Config{Rate: "1/h", Burst: 1, Key: "header:Authorization"})
	long := "Bearer " + strings.Repeat("x", 1000)
	other := "Bearer " + strings.Repeat("x", 999) + "y"
	if !k.AllowN(long, t0, 1).Allowed || k.AllowN(long, t0, 1).Allowed {
		t.Fatal("a long key: want allowed, then rejected")
	}
	if !k.AllowN(other, t0, 1).Allowed {
		t.Fatal("a different long key shares the first one's limiter")
	}
	for i := range k.shards {
		s := &k.shards[i]
		for key := range s.m {
			if len(key) > maxKeyLen {
				t.Fatalf("stored a key of %d bytes, want at most %d", len(key), maxKeyLen)
			}
		}
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
