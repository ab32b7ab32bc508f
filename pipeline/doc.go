// Package pipeline is the one attempt loop of switchboard: what happens to
// a request between "this route" and "this answer", the same for the HTTP
// proxy and for Go programs that call services directly.
//
// A Route is built from a Config over an upstream.Upstream and a
// Transport. Per request, Do runs, in order:
//
//  1. the rate limits (429 rate_limited; a leaky bucket delays instead);
//  2. the concurrency limits, the route's and then the upstream's (503
//     concurrency_limited, after an optional bounded wait in a queue);
//  3. the route breaker: while it is open the upstream is not touched and
//     the fallback chain answers, or 503 breaker_open;
//  4. the attempts: pick an endpoint (one not yet tried first), send
//     through the Transport under the per-try timeout, report the outcome
//     (passive health, latency, the endpoint's breaker), and decide on a
//     retry by the policy, the idempotency rule, whether the body can be
//     sent again and the retry budget; hedge the first attempt when asked;
//  5. the fallback chain when the attempts failed (retries_exhausted), the
//     pool had no endpoint (no_healthy_endpoint) or the answer's status is
//     one of its triggers; its responses carry X-Switchboard-Degraded.
//
// Without a retry policy a route still retries what is always safe, as
// nginx does by default: a failed connect (nothing was sent) and an
// exchange of an idempotent request without a body (or with a
// BufferedBody) that broke before any response byte, once, on another
// endpoint, when the upstream has one to
// offer (a timeout is not retried: a slow endpoint would get the load
// twice).
//
// Do returns the response to relay or an *Error with the HTTP status and a
// stable code (the Code constants) for the caller to answer with. Either
// way the caller calls Finish once the response is relayed, with the
// status it sent: that reports the endpoint's outcome (so passive health
// sees a body that broke off), the route breaker's, stores a good answer
// for the stale fallback step, and gives back the concurrency slots. Call
// is the per-request state; a front end embeds it in its own so that a
// request costs one allocation, and the attempt loop allocates nothing of
// its own for a request answered on its first try (the proxy's
// BenchmarkProxyHTTP1 counts the whole request).
//
// A front end that must not block (an event loop serving many connections
// on one thread) drives the same steps itself: Route.Begin, then per Step
// what it asks for (StepSend: send Call.Attempt and report it with
// Call.Answered; StepWait: a timer until Call.WaitUntil, then Call.Resume;
// StepBlock: Call.Block on a goroutine of its own), until StepDone and
// Call.Result. Do is that loop, carried out blocking. On the common path
// (no queue, no global rate limit, no hedge, no backup fallback step) no
// step blocks: the loop keeps the call inline from the request's head to
// the response's.
//
// The Transport is injected: the HTTP proxy implements it over its own
// HTTP/1 engine; HTTPTransport does it over any net/http RoundTripper.
//
// Most Go programs build an upstream.Upstream, a Route over it with
// HTTPTransport, and per request fill a Call, Do it, read the response and
// Finish (see the Example).
package pipeline
