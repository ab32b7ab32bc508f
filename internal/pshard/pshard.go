// Package pshard chooses a shard of a per-CPU structure for the calling
// goroutine: the shard of the P (the scheduler's processor, which runs
// one goroutine at a time on one thread) it runs on. Counters that every
// CPU updates on every request (the sharded histograms of package
// shardhist, the window of health's passive detector) keep a few shards,
// each on cache lines of its own, so that two CPUs do not pull one line
// back and forth; this package tells an update which shard is its CPU's.
//
// The choice is a token from a sync.Pool, whose Get and Put use a slot
// of the P they run on: a P keeps getting the token it put back, so the
// goroutines of one P update the same shard of every structure, and two
// Ps, holding different tokens, different ones. A token's low bits name
// the shard (see Count):
//
//	t := pshard.Get()
//	s := &shards[t.Load()&mask]
//	... update s; if another CPU was found in s, t.Add(1) ...
//	pshard.Put(t)
//
// Tokens are handed out in turn, so Ps start on different shards; but a
// P idle for two garbage collections loses its token and takes a new one,
// which may choose the shard another P's does (with two shards, one time
// in two). So, as Java's LongAdder rehashes a thread's probe, the user
// moves its token to the next shard (t.Add(1)) when it finds another CPU
// in its shard (a failed compare-and-swap, a failed TryLock): two Ps that
// share a shard part after a few updates. Sharing costs time, never a
// count.
//
// A random shard per update (math/rand/v2's per-thread generator) moves a
// shard's cache lines between CPUs as often as the shard was last written
// by another CPU: with two goroutines observing flat out into a shardhist
// histogram it took 46 ns an observation against the tokens' 12
// (client_golang's 131), and three observations between other work cost
// 108 ns against the tokens' 29 (client_golang's 224; shardhist's
// BenchmarkObserveParallel and BenchmarkObserveBetweenWork).
package pshard

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

var tokens = sync.Pool{New: func() any {
	return &tokenSlots[nextToken.Add(1)%uint32(len(tokenSlots))]
}}

var (
	// tokenSlots are the tokens, so that handing one out allocates
	// nothing; token i starts on shard i. Atomic because a P moves its
	// token, and after 256 tokens handed out, two Ps may hold one.
	tokenSlots [256]atomic.Uint32
	nextToken  atomic.Uint32
)

func init() {
	for i := range tokenSlots {
		tokenSlots[i].Store(uint32(i))
	}
}

// Get returns the calling P's token: its low bits (masked with the shard
// count less one) name the caller's shard. Give it back with Put when the
// update is done. Get allocates nothing (the pool, like every sync.Pool,
// makes its per-P array again once after each garbage collection).
func Get() *atomic.Uint32 { return tokens.Get().(*atomic.Uint32) }

// Put gives back a token that Get returned.
func Put(t *atomic.Uint32) { tokens.Put(t) }

// Count returns how many shards a structure should have on procs CPUs
// (runtime.GOMAXPROCS): the least power of two at least procs, but at
// most limit (a power of two). Past the limit memory buys little: more
// CPUs than shards still spread over all of them.
func Count(procs, limit int) int {
	n := 1
	for n < procs && n < limit {
		n *= 2
	}
	return n
}

// CacheLine is the alignment and granularity of a shard: 128 bytes, two
// 64-byte lines, because x86's adjacent-line prefetcher pulls lines in
// pairs (false sharing is then between pairs of lines), and 128 is the
// line size of Apple's and some other arm64 cores.
const CacheLine = 128

// Words returns the words of shards shards of n words each, every shard
// starting on a cache line boundary and padded to whole lines, and the
// stride between shards (in words).
func Words(shards, n int) (words []uint64, stride int) {
	const lineWords = CacheLine / 8
	stride = (n + lineWords - 1) / lineWords * lineWords
	raw := make([]uint64, shards*stride+lineWords)
	skip := 0
	if r := uintptr(unsafe.Pointer(&raw[0])) % CacheLine; r != 0 {
		skip = int(CacheLine-r) / 8
	}
	return raw[skip : skip+shards*stride], stride
}

// Int is a count that goroutines on several CPUs add to at once, such as
// the requests a route table is serving, which every event loop adds one
// to and takes one from per request: each CPU adds to its own shard, and
// Load sums them. One atomic word would move between the CPUs' caches on
// every step. Make it with NewInt; an Int is not copied after first use.
type Int struct {
	words  []uint64 // one per shard, stride apart (two's complement: a sum of steps)
	stride int
	mask   uint32
}

// NewInt returns an Int of shards shards (a power of two, see Count).
func NewInt(shards int) Int {
	words, stride := Words(shards, 1)
	return Int{words: words, stride: stride, mask: uint32(shards - 1)}
}

// Add adds n (negative: takes) on the shard of the P the caller runs on.
func (c *Int) Add(n int64) {
	t := Get()
	c.AddAt(int(t.Load()), n)
	Put(t)
}

// AddAt adds n on shard i (modulo the shard count): Add's step on a shard
// of the caller's choosing, for tests that spread steps as several CPUs
// do.
func (c *Int) AddAt(i int, n int64) {
	atomic.AddUint64(&c.words[(uint32(i)&c.mask)*uint32(c.stride)], uint64(n))
}

// Load returns the sum of the shards. Steps made meanwhile may or may not
// be in it; each step is whole.
func (c *Int) Load() int64 {
	var v uint64
	for off := 0; off < len(c.words); off += c.stride {
		v += atomic.LoadUint64(&c.words[off])
	}
	return int64(v)
}
