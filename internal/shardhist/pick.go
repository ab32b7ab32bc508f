package shardhist

import (
	"sync"
	"sync/atomic"
)

// An observation's shard is chosen by a token from a sync.Pool, whose
// Get and Put use a slot of the P (the scheduler's processor, which runs
// one goroutine at a time on one thread) they run on: a P keeps getting
// the token it put back, so the goroutines of one P update the same shard
// of every series, and two Ps, holding different tokens, different ones.
//
// Tokens are handed out in turn, so Ps start on different shards; but a
// P idle for two garbage collections loses its token and takes a new one,
// which may choose the shard another P's does (with two shards, one time
// in two). So, as Java's LongAdder rehashes a thread's probe, a token
// moves to the next shard when its compare-and-swap of a shard's sum
// fails, which says another CPU updated that shard meanwhile: two Ps that
// share a shard part after a few observations. Sharing costs time, never
// a count.
//
// A random shard per observation (math/rand/v2's per-thread generator,
// the peer random-shard in the benchmarks) moves a shard's cache lines
// between CPUs as often as the shard was last written by another CPU:
// with two goroutines observing flat out it took 46 ns an observation
// against the tokens' 12 (client_golang's 131), and three observations
// between other work cost 108 ns against the tokens' 29 (client_golang's
// 224; BenchmarkObserveParallel, BenchmarkObserveBetweenWork).
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

// findBucket returns the index of the first of bounds (increasing) that is
// at least v, or len(bounds) (+Inf) if none is, or if v is NaN. A scan
// that stops at the bucket, as client_golang's for fewer than 35 buckets:
// for switchboard's 15 latency buckets it beats a binary search (whose
// branches a predictor cannot guess) and ties a scan without branches on
// latencies over the whole range, and beats both on the sub-millisecond
// ones of a proxy next to its backends (BenchmarkFindBucket).
func findBucket(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}
