// Package health decides whether upstream endpoints can take traffic.
//
// Active checks (Monitor) probe each endpoint on a schedule with a Checker
// (HTTPCheck, TCPCheck, GRPCCheck) and turn consecutive results into verdicts: Fall
// failures in a row make an endpoint unhealthy, Rise passes in a row make it
// healthy again. The schedule spreads probes with jitter, backs off from a
// dead endpoint, and probes a long-healthy one less often until any failure
// signal (a failed check, or Nudge from passive health) restores the base
// interval.
//
// Passive health (outlier detection) watches real traffic through
// endpoint.Observer.
//
// Neither sets an endpoint's state by itself: both report verdicts to the
// integrator, which combines them with the breaker and draining into the one
// endpoint.State and refreshes the pool.
package health
