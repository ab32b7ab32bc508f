package shardhist

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
