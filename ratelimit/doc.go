// Package ratelimit limits how often something may happen: requests per
// client, per route, or in flight at once. It refuses some on purpose so
// that the rest succeed, instead of letting all of them time out.
//
// # Algorithms
//
// Every algorithm implements Limiter. Its methods take the current time as
// a parameter (AllowN(now, n)), so tests and simulations need no clock;
// Allow() wrappers call time.Now. Most callers should use New with a Config,
// or NewKeyed for one limiter per client. A caller that would rather wait
// for its turn than be refused uses Wait, which for a token bucket queues
// waiters in arrival order as golang.org/x/time/rate's Limiter.Wait does.
//
//   - token_bucket (TokenBucket): a bucket of Burst tokens refilled at Rate;
//     each request takes one. Allows bursts up to Burst, then Rate on
//     average. Implemented as GCRA (the generic cell rate algorithm): the
//     state is a single int64, the "theoretical arrival time" at which the
//     bucket is full again, advanced with compare-and-swap. It is lock-free
//     and, because every admission advances the time by exactly one
//     interval, concurrent callers cannot admit more than
//     Burst + Rate*elapsed between them (golang/go#71360 is an example of a
//     limiter that once could). The usual choice.
//   - leaky_bucket (LeakyBucket): a queue drained at exactly Rate. ReserveN
//     admits up to Queue waiting requests and returns each one's Delay, so
//     the output is evenly spaced: one request per interval, never faster.
//     For upstreams that cannot take bursts at all. Rejects when the queue
//     is full or the wait would exceed MaxWait.
//   - fixed_window (FixedWindow): N per window aligned to the clock ("5/m"
//     resets on the minute). Simple to explain, but admits 2N across a
//     window edge: N in the last moment of one window and N in the first of
//     the next.
//   - sliding_window: prevents that edge burst. The counter variant
//     (SlidingWindow) weighs the previous window's count by how much of it
//     the sliding window still covers, in constant memory; it is an
//     estimate that assumes the previous window's requests were spread
//     evenly. The log variant (SlidingLog) remembers every admission of the
//     last window and is exact, at 8 bytes per remembered request; it is
//     chosen automatically for limits up to LogMaxLimit.
//
// Every Result carries Limit, Remaining, ResetAfter and RetryAfter, for the
// RateLimit-* and Retry-After response headers (Result.SetHeaders).
//
// # Keys
//
// Keyed holds one limiter per key, found in a request by a KeySource
// (client_ip, header:NAME, path, route). Its memory is bounded: a key whose
// limiter is back in its initial state is dropped (a new limiter would
// decide the same), and beyond MaxKeys the least recently used keys are
// evicted, so a flood of distinct keys cannot exhaust memory.
//
// # Concurrency
//
// Concurrency caps the requests in flight, with an optional bounded FIFO
// queue (what resilience libraries call a bulkhead): it keeps one slow
// upstream from taking every connection.
//
// # Global limits
//
// Package ratelimit/redis shares a token bucket among many processes
// through Redis.
package ratelimit
