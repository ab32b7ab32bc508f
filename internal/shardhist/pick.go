package shardhist

import (
	"sync"
	"sync/atomic"
)

// An observation's shard is chosen by a token from a sync.Pool, whose
// Get and Put use a slot of the P (the scheduler's processor, which runs
// one goroutine at a time on one thread) they run on: a P keeps getting
// the token it put back, so the goroutines of one P update the same shard
// of every series, and two Ps update different ones while each has its own
// token. The tokens are handed out in turn, so Ps get different ones;
// after a garbage collection empties the pool (a P's token then comes back
// from the victim cache, or a new one is handed out) or a goroutine moved
// between Get and Put, two Ps may share a shard for a while, which costs
// time, never a count.
//
// A random shard per observation (math/rand/v2's per-thread generator) is
// some 5 ns cheaper on one goroutine, but moves a shard's cache lines
// between CPUs as often as the shard is last written by another CPU: with
// two goroutines observing flat out it took 30-60 ns an observation (8
// and 2 shards) against 13 ns for the pool's tokens, and observations
// spread between other work cost about twice as much CPU as with the
// tokens (BenchmarkObserveParallel, BenchmarkObserveBetweenWork).
var tokens = sync.Pool{New: func() any {
	return &tokenSlots[nextToken.Add(1)%uint32(len(tokenSlots))]
}}

var (
	// tokenSlots are the tokens: token i is tokenSlots[i], valued i,
	// so that handing one out allocates nothing.
	tokenSlots [256]uint32
	nextToken  atomic.Uint32
)

func init() {
	for i := range tokenSlots {
		tokenSlots[i] = uint32(i)
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
