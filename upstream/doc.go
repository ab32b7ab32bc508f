// Package upstream is one upstream as one value: the pool of its
// endpoints, the balancer over the pool, the health machinery that judges
// them — active checks, passive ejection, a circuit breaker per endpoint,
// the registry's own verdict — and the discovery view that keeps the pool's
// membership, all folded into each endpoint's one state and reason.
//
// New builds an upstream from a Config and starts it: static Targets, or a
// View of a registry (a *discovery.View over any registry backend). Per
// request, Pick chooses an endpoint (untried ones first on a retry; the
// caller's preferred one, balance.Info.Prefer, while it can take traffic:
// sticky sessions) and the Result's Done reports how it went; neither takes a lock nor
// allocates. Done feeds the endpoint's in-flight count, the balancer's
// latency and load tracking, passive health and the endpoint's breaker.
//
// The folding, most severe first: ejected (passive), breaker_open (the
// endpoint's breaker), unhealthy (active checks, or the registry reports
// it critical), probation (back from an ejection), healthy. A passing
// active check ends a passive ejection early, on probation. Every change
// is logged once, counted (Metrics) and published to the balancer. Below
// Health.PanicThreshold of endpoints ready, the balancer is given every
// endpoint (panic mode), so that the survivors are not crushed.
//
// An upstream stays the same value across configuration changes: Prepare
// builds what a new Config needs without touching what runs, keeping the
// pool (so every endpoint keeps its live state) and each part whose
// settings are unchanged; Commit swaps it in and stops what is no longer
// used; Discard drops it. The upstream owns its goroutines (checks, the
// ejection clock, a balancer's background work) and its view, and stops
// them on Close.
//
// Active checks are probed once per address per process: upstreams (of
// the proxy, of the Go client, or a reload's old and new one) whose active
// check settings are equal share one probe stream of package health, and
// each folds its results into its own endpoints' states (see
// health.Monitor).
package upstream
