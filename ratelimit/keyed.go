package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// DefaultMaxKeys is the default bound on the number of keys a Keyed
// limiter remembers.
const DefaultMaxKeys = 100_000

// Keyed holds one limiter per key (client address, API key, path),
// created on first use, with bounded memory:
//
//   - A key whose limiter has become idle, equivalent to a new one (a full
//     token bucket, an empty queue, an expired window), may be dropped at
//     any time: creating a new limiter when the key comes back changes no
//     decision. For a token bucket that is burst/rate after its last use
//     at the latest. Keyed drops idle keys lazily, looking at two slots
//     whenever it adds a key, and all of them in Sweep.
//   - Beyond MaxKeys, a new key evicts an old one by the CLOCK algorithm
//     (an approximation of least-recently-used): idle keys first, then keys
//     not used since the clock hand last passed. Such an eviction forgets a
//     key that may be rate limited; it is what keeps a flood of distinct
//     keys from exhausting memory, and the flood's own keys, used once,
//     are the first to go.
//
// The keys live in independently locked shards, each holding at most its
// share of MaxKeys (so with exactly MaxKeys active keys, the fullest shards
// start evicting while the total is a little below MaxKeys). Each shard is
// an open-addressing hash table; a key is remembered as a 128-bit hash under
// seeds chosen at random per process, not as its text, so memory per key
// does not depend on the key's length and no client can construct two keys
// that share a limiter. A token or leaky bucket's state (one int64) lives
// in the table slot itself: a lookup touches one cache line, and 100k keys
// take about 4 MB. The window algorithms keep a pointer to a limiter per
// key. AllowN on an existing key takes one uncontended lock and allocates
// nothing.
type Keyed struct {
	seed   [2]maphash.Seed
	mask   uint64
	source KeySource

	// Exactly one of buckets and limiters is set.
	buckets    []shard[int64] // token_bucket, leaky_bucket: the state inline
	leaky      bool           // buckets are leaky (q) rather than token (g)
	g          gcra
	q          leaky
	limiters   []shard[limiter] // the window algorithms
	newLimiter func() limiter
}

// newKeyed returns a Keyed for a validated plan.
func newKeyed(p plan) *Keyed {
	n := 64
	for n > 1 && p.maxKeys/n < 64 {
		n /= 2
	}
	k := &Keyed{
		seed:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		mask:   uint64(n - 1),
		source: p.source,
	}
	switch p.algorithm {
	case TokenBucketName:
		k.g = newGCRA(p.rate, p.cfg.Burst)
		k.buckets = makeShards[int64](n, p.maxKeys)
	case LeakyBucketName:
		k.q, k.leaky = newLeaky(p.rate, p.cfg.Queue, p.cfg.MaxWait), true
		k.buckets = makeShards[int64](n, p.maxKeys)
	default:
		k.newLimiter = p.newLimiter
		k.limiters = makeShards[limiter](n, p.maxKeys)
	}
	return k
}

// Source returns where the proxy should take the keys from.
func (k *Keyed) Source() KeySource { return k.source }

// Allow is AllowN(key, time.Now(), 1).Allowed.
func (k *Keyed) Allow(key string) bool { return k.AllowN(key, time.Now(), 1).Allowed }

// AllowN is the AllowN of key's limiter.
func (k *Keyed) AllowN(key string, now time.Time, n int) Result {
	if k.buckets != nil {
		return k.bucket(key, now, n, false)
	}
	return k.limiter(key, now).AllowN(now, n)
}

// ReserveN is the ReserveN of key's limiter.
func (k *Keyed) ReserveN(key string, now time.Time, n int) Result {
	if k.buckets != nil {
		return k.bucket(key, now, n, true)
	}
	return k.limiter(key, now).ReserveN(now, n)
}

func (k *Keyed) id(key string) [2]uint64 {
	// The low bit of id[1] is set so that no key's id is the zero value
	// that marks an empty slot.
	return [2]uint64{maphash.String(k.seed[0], key), maphash.String(k.seed[1], key) | 1}
}

// bucket runs a token or leaky bucket's step for key under its shard's
// lock, on the state in the table slot.
func (k *Keyed) bucket(key string, now time.Time, n int, wait bool) Result {
	checkN(n)
	id := k.id(key)
	t := clock.Nanos(now)
	s := &k.buckets[id[0]&k.mask]
	s.mu.Lock()
	i, ok := s.find(id)
	if !ok {
		i = s.insert(id, fresh, func(tat int64) bool { return tat <= t })
	}
	sl := &s.slots[i]
	sl.ref = true
	var res Result
	if k.leaky {
		sl.v, res = k.q.take(sl.v, t, n, wait)
	} else {
		sl.v, res = k.g.take(sl.v, t, n)
	}
	s.mu.Unlock()
	return res
}

// limiter returns key's limiter, creating it if needed.
func (k *Keyed) limiter(key string, now time.Time) limiter {
	id := k.id(key)
	s := &k.limiters[id[0]&k.mask]
	s.mu.Lock()
	i, ok := s.find(id)
	if !ok {
		i = s.insert(id, k.newLimiter(), func(l limiter) bool { return l.idle(now) })
	}
	sl := &s.slots[i]
	sl.ref = true
	l := sl.v
	s.mu.Unlock()
	return l
}

// Sweep drops every idle key (see Keyed) and returns how many it dropped.
// Keys are also dropped lazily as new ones arrive, so calling Sweep is
// optional: it returns memory sooner after a burst of one-off keys. Each
// shard is locked in turn, not all at once.
func (k *Keyed) Sweep(now time.Time) int {
	t := clock.Nanos(now)
	dropped := 0
	for i := range k.buckets {
		dropped += k.buckets[i].sweep(func(tat int64) bool { return tat <= t })
	}
	for i := range k.limiters {
		dropped += k.limiters[i].sweep(func(l limiter) bool { return l.idle(now) })
	}
	return dropped
}

// Len returns the number of keys held.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.buckets {
		n += k.buckets[i].len()
	}
	for i := range k.limiters {
		n += k.limiters[i].len()
	}
	return n
}

// shard is one lock's share of a Keyed: a hash table with linear probing,
// of at most cap entries, at most 7/8 full. (Allowing 7/8 rather than 3/4
// fits the default's 1563 keys per shard in 2048 slots instead of 4096:
// half the memory, and fewer cache misses, for a successful lookup of
// about 2.5 probes on average within one or two cache lines.)
type shard[V any] struct {
	mu    sync.Mutex
	slots []slot[V] // length a power of two; nil until the first key
	n     int       // occupied slots
	cap   int       // most entries allowed
	hand  int       // the CLOCK hand: a slot index
	_     [64]byte  // keeps neighbouring shards' locks off one cache line
}

type slot[V any] struct {
	id  [2]uint64 // the key's hash; zero: empty
	v   V
	ref bool // used since the hand last passed
}

func makeShards[V any](n, maxKeys int) []shard[V] {
	shards := make([]shard[V], n)
	for i := range shards {
		shards[i].cap = maxKeys / n
		if i < maxKeys%n {
			shards[i].cap++
		}
	}
	return shards
}

// home is the slot where id's probe sequence starts. id[0]'s low bits
// chose the shard, so the position comes from id[1].
func (s *shard[V]) home(id [2]uint64) int { return int(id[1]>>1) & (len(s.slots) - 1) }

// find returns the index of id's slot and true, or false if id is absent.
func (s *shard[V]) find(id [2]uint64) (int, bool) {
	if len(s.slots) == 0 {
		return 0, false
	}
	mask := len(s.slots) - 1
	for i := s.home(id); ; i = (i + 1) & mask {
		switch s.slots[i].id {
		case id:
			return i, true
		case [2]uint64{}:
			return i, false
		}
	}
}

// insert adds id with value v and returns its slot index. On the way it
// drops up to two idle entries under the hand and, when the shard is full,
// evicts one.
func (s *shard[V]) insert(id [2]uint64, v V, idle func(V) bool) int {
	for range 2 {
		if s.n == 0 {
			break
		}
		if s.hand >= len(s.slots) {
			s.hand = 0
		}
		if sl := &s.slots[s.hand]; sl.id != [2]uint64{} && idle(sl.v) {
			s.delete(s.hand)
		} else {
			s.hand++
		}
	}
	if s.n >= s.cap {
		s.evict(idle)
	}
	if 8*(s.n+1) > 7*len(s.slots) {
		s.grow()
	}
	i, _ := s.find(id)
	s.slots[i] = slot[V]{id: id, v: v}
	s.n++
	return i
}

// evict removes one entry: the first under the hand that is idle or not
// used since the hand last passed, clearing use marks on the way. Two
// turns of the hand always find one.
func (s *shard[V]) evict(idle func(V) bool) {
	for range 2*len(s.slots) + 1 {
		if s.hand >= len(s.slots) {
			s.hand = 0
		}
		sl := &s.slots[s.hand]
		switch {
		case sl.id == [2]uint64{}:
		case !sl.ref || idle(sl.v):
			s.delete(s.hand)
			return
		default:
			sl.ref = false
		}
		s.hand++
	}
}

// delete empties slot i, shifting later entries of its probe run back so
// that every entry stays reachable from its home without tombstones.
func (s *shard[V]) delete(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; s.slots[j].id != [2]uint64{}; j = (j + 1) & mask {
		// The entry at j may move to i unless its home lies cyclically
		// in (i, j].
		h := s.home(s.slots[j].id)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = slot[V]{}
	s.n--
}

// grow doubles the table (from 8) and reinserts every entry.
func (s *shard[V]) grow() {
	old := s.slots
	s.slots = make([]slot[V], max(8, 2*len(old)))
	s.hand = 0
	for _, sl := range old {
		if sl.id != [2]uint64{} {
			i, _ := s.find(sl.id)
			s.slots[i] = sl
		}
	}
}

// sweep deletes every idle entry and returns how many.
func (s *shard[V]) sweep(idle func(V) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped := 0
	for i := 0; i < len(s.slots); {
		// delete may shift a later entry into i: look at i again.
		if sl := &s.slots[i]; sl.id != [2]uint64{} && idle(sl.v) {
			s.delete(i)
			dropped++
		} else {
			i++
		}
	}
	return dropped
}

func (s *shard[V]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
