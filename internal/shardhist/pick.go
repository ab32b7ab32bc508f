package shardhist

import "math/rand/v2"

// pick returns a number whose low bits choose an observation's shard:
// math/rand/v2's generator, which is per thread (the runtime's per-M
// ChaCha8), so picking costs a few nanoseconds and touches no shared
// memory.
func pick() uint32 { return rand.Uint32() }

// findBucket returns the index of the first of bounds (increasing) that is
// at least v, or len(bounds) (+Inf) if none is, or if v is NaN.
func findBucket(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}
