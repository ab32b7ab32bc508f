package grpcclient

// WithBackoffRand returns o with rnd as the backoff's random source, so
// that a test knows each backoff (rnd(n) = n-1: always the ceiling).
func WithBackoffRand(o RetryOptions, rnd func(n int64) int64) RetryOptions {
	o.rnd = rnd
	return o
}
