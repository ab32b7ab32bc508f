// Package retry re-sends a failed request when that is safe and cheap
// enough: safe because the request is idempotent (or says so with an
// Idempotency-Key) and its body can be replayed, cheap enough because a
// Budget keeps retries a small fraction of recent traffic, so that retries
// cannot multiply an outage.
//
// The pieces stand alone and the proxy composes them per route:
//
//   - Policy: attempts, per-try timeout, backoff with full jitter, and what
//     is worth retrying (connect failure, reset before any response byte,
//     timeout, a status list). Validate it at load time.
//   - Retryable: the idempotency rule for one request.
//   - ReplayableBody: tees a request body into a bounded buffer while the
//     first attempt streams it, so that a retry can send it again.
//   - Budget: the retry budget (Finagle, Linkerd and gRPC call it that).
//     Its methods take the current time as a parameter.
//
// The pieces are the retry rules, not a retry loop: package pipeline holds
// the one attempt loop every front end uses (the HTTP proxy and the Go
// client), which applies them per route together with hedging, the
// breaker and the fallback chain.
package retry
