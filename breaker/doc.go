// Package breaker is a circuit breaker: it stops calls to a dependency that
// is failing, lets a few trial calls through after a while, and lets all
// traffic back once they succeed.
//
// A Breaker is closed (calls go through and their outcomes are counted),
// open (calls are refused with ErrOpen) or half-open (a fixed number of
// probe calls go through; all must succeed to close, one failure reopens).
// It opens when, over a sliding window of the last window_size calls or the
// last window of time, at least min_requests calls were seen and the share
// of failures reaches failure_rate, or the share of calls slower than
// slow_threshold reaches slow_rate; or when the window holds failure_count
// failures, however many calls succeeded ("5 failures within 60s"); or
// after consecutive_failures failures in a row. It stays open for open_for;
// each time the probes fail again the open period doubles, up to
// max_open_for.
//
// Most callers use the two-step form on the request path:
//
//	t, err := b.Allow(now)
//	if err != nil { // ErrOpen: fail fast, or fall back
//	}
//	... call the dependency ...
//	t.Done(outcome, time.Now())
//
// Time is a parameter of Allow, Done and State, so that tests drive the
// breaker with explicit times; Do is the convenience that reads the clock.
// While the breaker is closed, Allow and Done take no lock and allocate
// nothing: the state is a pointer to the current phase, and outcomes go
// into that phase's window with atomic adds. Transitions and half-open
// probes take a mutex.
//
// What counts as a failure is decided by a Classifier; the default one
// (from Config.FailureStatuses) counts transport errors, timeouts and 5xx
// statuses as failures and ignores the caller's own cancellation, which
// says nothing about the dependency.
package breaker
