package ratelimit

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// DefaultMaxKeys is the default bound on the number of keys a Keyed
// limiter remembers.
const DefaultMaxKeys = 100_000

// maxKeyLen is the longest key stored as is; a longer one (a JWT in a
// header, a long path) is stored as a 128-bit keyed hash, so that the
// memory per key is bounded too. The hash seeds are random per process, so
// a client cannot construct two keys that share a limiter.
const maxKeyLen = 64

// Keyed holds one limiter per key (client address, API key, path),
// created on first use, with bounded memory:
//
//   - A key whose limiter has become idle, equivalent to a new one (a full
//     token bucket, an empty queue, an expired window), may be dropped at
//     any time: creating a new limiter when the key comes back changes no
//     decision. Dropping idle keys is therefore free, and Keyed does it
//     lazily, a few entries on every new key and all of them in Sweep.
//   - Beyond MaxKeys, a new key evicts an old one by the CLOCK algorithm
//     (an approximation of least-recently-used): idle keys first, then keys
//     not used since the clock hand last passed. Such an eviction forgets a
//     key that may be rate limited; it is what keeps a flood of distinct
//     keys from exhausting memory, and the flood's own keys, used once,
//     are the first to go.
//
// The keys live in independently locked shards, each holding at most its
// share of MaxKeys, so a lookup takes one uncontended lock. AllowN on an
// existing key allocates nothing.
type Keyed struct {
	shards     []keyedShard
	mask       uint64
	seed       maphash.Seed
	seed2      maphash.Seed // with seed, hashes keys longer than maxKeyLen
	newLimiter func() limiter
	source     KeySource
}

type keyedShard struct {
	mu   sync.Mutex
	m    map[string]*keyedEntry
	ring []*keyedEntry // the CLOCK: every entry, in no particular order
	hand int
	cap  int
	_    [64]byte // keeps neighbouring shards' locks off one cache line
}

type keyedEntry struct {
	lim limiter
	key string
	ref bool // used since the hand last passed
}

// newKeyed returns a Keyed of up to maxKeys limiters made by newLimiter.
func newKeyed(maxKeys int, source KeySource, newLimiter func() limiter) *Keyed {
	n := 64
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	k := &Keyed{
		shards:     make([]keyedShard, n),
		mask:       uint64(n - 1),
		seed:       maphash.MakeSeed(),
		seed2:      maphash.MakeSeed(),
		newLimiter: newLimiter,
		source:     source,
	}
	for i := range k.shards {
		s := &k.shards[i]
		s.cap = maxKeys / n
		if i < maxKeys%n {
			s.cap++
		}
		s.m = make(map[string]*keyedEntry)
	}
	return k
}

// Source returns where the proxy should take the keys from.
func (k *Keyed) Source() KeySource { return k.source }

// Allow is AllowN(key, time.Now(), 1).Allowed.
func (k *Keyed) Allow(key string) bool { return k.AllowN(key, time.Now(), 1).Allowed }

// AllowN is the AllowN of key's limiter.
func (k *Keyed) AllowN(key string, now time.Time, n int) Result {
	return k.get(key, now).AllowN(now, n)
}

// ReserveN is the ReserveN of key's limiter.
func (k *Keyed) ReserveN(key string, now time.Time, n int) Result {
	return k.get(key, now).ReserveN(now, n)
}

// get returns key's limiter, creating it if needed.
func (k *Keyed) get(key string, now time.Time) limiter {
	h := maphash.String(k.seed, key)
	var digest [18]byte
	if len(key) > maxKeyLen {
		h2 := maphash.String(k.seed2, key)
		digest[0], digest[1] = 0, 'h'
		for i := range 8 {
			digest[2+i] = byte(h >> (8 * i))
			digest[10+i] = byte(h2 >> (8 * i))
		}
	}
	s := &k.shards[h&k.mask]
	s.mu.Lock()
	var e *keyedEntry
	if len(key) > maxKeyLen {
		e = s.m[string(digest[:])]
	} else {
		e = s.m[key]
	}
	if e != nil {
		if !e.ref {
			e.ref = true
		}
		s.mu.Unlock()
		return e.lim
	}
	if len(key) > maxKeyLen {
		key = string(digest[:])
	} else {
		key = strings.Clone(key) // don't pin the request's memory
	}
	e = &keyedEntry{lim: k.newLimiter(), key: key}
	s.insert(e, now)
	s.mu.Unlock()
	return e.lim
}

// insert adds e, dropping idle entries near the hand and, when the shard is
// full, evicting one.
func (s *keyedShard) insert(e *keyedEntry, now time.Time) {
	// Lazy idle expiry: look at two entries per insertion, so the whole
	// ring is examined once per len(ring)/2 new keys.
	for range 2 {
		if len(s.ring) == 0 {
			break
		}
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		if s.ring[s.hand].lim.idle(now) {
			s.remove(s.hand)
		} else {
			s.hand++
		}
	}
	if len(s.ring) >= s.cap {
		s.evict(now)
	}
	s.ring = append(s.ring, e)
	s.m[e.key] = e
}

// evict removes one entry: the first under the hand that is idle or not
// used since the hand last passed, clearing use marks on the way. Two
// turns of the hand always find one.
func (s *keyedShard) evict(now time.Time) {
	for range 2*len(s.ring) + 1 {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		c := s.ring[s.hand]
		if !c.ref || c.lim.idle(now) {
			s.remove(s.hand)
			return
		}
		c.ref = false
		s.hand++
	}
}

// remove deletes ring[i], moving the last entry into its place.
func (s *keyedShard) remove(i int) {
	delete(s.m, s.ring[i].key)
	last := len(s.ring) - 1
	s.ring[i] = s.ring[last]
	s.ring[last] = nil
	s.ring = s.ring[:last]
}

// Sweep drops every idle key (see Keyed) and returns how many it dropped.
// Keys are also dropped lazily as new ones arrive, so calling Sweep is
// optional: it returns memory sooner after a burst of one-off keys. Each
// shard is locked in turn, not all at once.
func (k *Keyed) Sweep(now time.Time) int {
	dropped := 0
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		for j := 0; j < len(s.ring); {
			if s.ring[j].lim.idle(now) {
				s.remove(j)
				dropped++
			} else {
				j++
			}
		}
		s.mu.Unlock()
	}
	return dropped
}

// Len returns the number of keys held.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		n += len(s.ring)
		s.mu.Unlock()
	}
	return n
}
