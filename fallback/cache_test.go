package fallback

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func TestCacheEvictsLeastRecentlyUsedBeyondMaxEntries(t *testing.T) {
	c := NewCache(CacheConfig{MaxEntries: 3})
	for _, k := range []string{"a", "b", "c"} {
		c.Store(k, 200, nil, []byte(k), t0)
	}
	if _, ok := c.Get("a", time.Minute, t0); !ok { // a is now the most recent
		t.Fatal("a missing before any eviction")
	}
	c.Store("d", 200, nil, []byte("d"), t0)
	if n, _ := c.Len(); n != 3 {
		t.Fatalf("Len = %d entries, want max_entries 3", n)
	}
	if _, ok := c.Get("b", time.Minute, t0); ok {
		t.Fatal("b survived; it was the least recently used and should have been evicted")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.Get(k, time.Minute, t0); !ok {
			t.Fatalf("%s was evicted; only b should have been", k)
		}
	}
}

func TestCacheEvictsBeyondMaxBytes(t *testing.T) {
	// Each entry: 1-byte key + 99-byte body = 100 bytes.
	c := NewCache(CacheConfig{MaxBytes: 350, MaxResponseBytes: 200})
	body := []byte(strings.Repeat("x", 99))
	for i := range 5 {
		c.Store(fmt.Sprint(i), 200, nil, body, t0)
	}
	n, bytes := c.Len()
	if n != 3 || bytes != 300 {
		t.Fatalf("Len = %d entries, %d bytes; want 3 entries, 300 bytes within max_bytes 350", n, bytes)
	}
	if _, ok := c.Get("1", time.Minute, t0); ok {
		t.Fatal("entry 1 survived; the two oldest should have been evicted")
	}
	// Headers count too: 1 + 99 + len("Etag")+len("v1") = 106.
	c.Store("5", 200, http.Header{"Etag": {"v1"}}, body, t0)
	if n, bytes := c.Len(); n != 3 || bytes != 306 {
		t.Fatalf("Len = %d, %d; want 3 entries, 306 bytes", n, bytes)
	}
}

func TestCacheRefusesResponseOverPerResponseCap(t *testing.T) {
	c := NewCache(CacheConfig{MaxResponseBytes: 10})
	if !c.Store("k", 200, nil, []byte("small"), t0) {
		t.Fatal("Store refused a 6-byte response under the 10-byte cap")
	}
	if c.Store("k", 200, nil, []byte("far too large"), t0) {
		t.Fatal("Store accepted a response over max_response_bytes")
	}
	if _, ok := c.Get("k", time.Minute, t0); ok {
		t.Fatal("the older small response is still served after a newer one was too large to keep")
	}
}

func TestCacheExpiresAtMaxAge(t *testing.T) {
	c := NewCache(CacheConfig{})
	c.Store("k", 200, nil, []byte("v"), t0)
	if _, ok := c.Get("k", 30*time.Second, t0.Add(30*time.Second-time.Nanosecond)); !ok {
		t.Fatal("entry missing just before max_age")
	}
	if _, ok := c.Get("k", 30*time.Second, t0.Add(30*time.Second)); ok {
		t.Fatal("entry served at exactly max_age; it must be younger than max_age")
	}
	if n, _ := c.Len(); n != 0 {
		t.Fatalf("expired entry still held: Len = %d", n)
	}
}

func TestCacheCopiesWhatItStores(t *testing.T) {
	c := NewCache(CacheConfig{})
	body := []byte("original")
	h := http.Header{"X-A": {"1"}}
	c.Store("k", 200, h, body, t0)
	copy(body, "mutated!")
	h.Set("X-A", "2")
	e, _ := c.Get("k", time.Minute, t0)
	if string(e.Body) != "original" || e.Header.Get("X-A") != "1" {
		t.Fatalf("stored entry changed with the caller's buffers: %q %v", e.Body, e.Header)
	}
}

func TestCacheConcurrentUse(t *testing.T) {
	c := NewCache(CacheConfig{MaxEntries: 50, MaxBytes: 4000})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := fmt.Sprint((g*7 + i) % 80)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				c.Store(k, 200, http.Header{"K": {k}}, []byte(strings.Repeat("b", i%100)), now)
				c.Get(fmt.Sprint(i%80), time.Second, now)
			}
		}()
	}
	wg.Wait()
	n, bytes := c.Len()
	if n > 50 || bytes > 4000 {
		t.Fatalf("after concurrent use Len = %d entries, %d bytes; limits are 50 and 4000", n, bytes)
	}
}
