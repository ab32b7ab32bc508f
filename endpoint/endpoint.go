// Package endpoint holds the one model every part of switchboard shares: an
// upstream instance (Endpoint) with its live state, and the immutable
// snapshots (Set) of a named group of them (Pool) that balancers read
// without locks.
//
// Health checks, passive ejection, the circuit breaker and discovery change
// an endpoint's state through SetStatus and Pool.Update; they never reach
// into a balancer. A balancer sees the change as a new Set.
package endpoint

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Outcome is what a caller reports back after using an endpoint once.
type Outcome struct {
	// Err is the transport error (connect, reset, timeout); nil when the
	// endpoint answered, whatever the status.
	Err error
	// Status is the HTTP status code, or 0 for L4 or when there was no
	// response.
	Status int
	// Latency is the time from the pick to the response header (or to the
	// error).
	Latency time.Duration
	// Canceled is set when the caller gave up (client went away). Such an
	// outcome says nothing about the endpoint and must not count against it.
	Canceled bool
	// LoadReport is the endpoint's own load report, if it sent one (the raw
	// X-Switchboard-Load response header: "cpu=0.42, mem=0.31"). It may be
	// borrowed from the response, valid only during Done: the HTTP
	// proxy's event loop reads a connection's next response into the same
	// memory. A policy that keeps it keeps a copy (strings.Clone).
	LoadReport string
	// At is when the use ended, in Nanotime's units; 0 (unset) means that
	// whoever needs the time reads the clock. A caller that read the clock
	// to measure Latency passes that reading, so that latency-aware
	// policies (the stamp of their averages) and breakers do not read it
	// again; a policy that reads the clock itself sets At before it hands
	// the outcome on to Release and the endpoint's observer.
	At int64
}

// Nanotime reads the monotonic clock in the unit of Outcome.At and
// balance.Info.Now: nanoseconds since the process started, plus 1 so that
// a reading is never 0 (unset). It costs about half of time.Now.
func Nanotime() int64 { return clock.NowNanos(clock.Real) + 1 }

// NanotimeOf is t in Nanotime's units, for a caller that already holds a
// time.Now reading: no clock read.
func NanotimeOf(t time.Time) int64 { return clock.Nanos(t) + 1 }

// TimeOf is the time.Time of a Nanotime reading n: the inverse of
// NanotimeOf, without reading the clock. It has a monotonic reading, so it
// compares with time.Now readings on the monotonic clock.
func TimeOf(n int64) time.Time { return clock.Time(n - 1) }

// Failed reports whether the outcome counts against the endpoint: a
// transport error that is not the caller's own cancellation.
func (o Outcome) Failed() bool { return o.Err != nil && !o.Canceled }

// Time is when the use ended: TimeOf(o.At), or time.Now() when At is
// unset. An observer that keeps time.Time (a breaker's window) calls it
// instead of time.Now: for an outcome that carries At it reads no clock.
func (o *Outcome) Time() time.Time {
	if o.At != 0 {
		return TimeOf(o.At)
	}
	return time.Now()
}

// Observer receives every outcome reported for an endpoint. Passive health,
// latency tracking and breakers implement it. Observe runs on the request
// path: it must be cheap and must not block.
type Observer interface {
	Observe(ep *Endpoint, o Outcome)
}

// Observers fans one outcome out to several observers (passive health and
// a breaker, say), in order.
type Observers []Observer

// Observe implements Observer.
func (os Observers) Observe(ep *Endpoint, o Outcome) {
	for _, x := range os {
		x.Observe(ep, o)
	}
}

// State is the single answer to "can this endpoint take traffic, and if not,
// why not".
type State uint8

// The states an endpoint can be in. Only Healthy, SlowStart and Probation
// take traffic.
const (
	Healthy     State = iota // takes traffic
	SlowStart                // takes a ramping share of traffic
	Probation                // back from ejection, must prove itself
	Unhealthy                // failed active health checks
	Ejected                  // removed by passive health (outlier detection)
	Draining                 // finishing in-flight work, takes no new work
	BreakerOpen              // its circuit breaker is open
)

var stateNames = [...]string{"healthy", "slow_start", "probation", "unhealthy", "ejected", "draining", "breaker_open"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// Serving reports whether an endpoint in this state may be picked.
func (s State) Serving() bool { return s <= Probation }

// Status is an endpoint's state with the reason for it and when it began.
type Status struct {
	State  State
	Reason string
	Since  time.Time
}

// Spec describes an endpoint as configuration or discovery states it. The
// yaml tags are the keys of an entry of an upstream's targets list.
type Spec struct {
	// Address is host:port. Required.
	Address string `yaml:"address"`
	// ID names the instance: the registry's instance ID for a discovered
	// endpoint. Optional for a static target, whose ID is its address
	// unless set. consistent_hash with hash: md5 places its ring points by
	// ID, as the Python ring places them by node ID.
	ID string `yaml:"id"`
	// Weight is the endpoint's relative weight; below 1 (0, absent) it is
	// taken as 1. A configuration file allows 1 to 10000.
	Weight int `yaml:"weight"`
	// Zone is an optional locality label.
	Zone string `yaml:"zone"`
	// Meta is the metadata discovery reports for the instance. It is not a
	// key of a static target: nothing reads a static target's metadata.
	Meta map[string]string `yaml:"-"`
}

// Endpoint is one upstream instance: its identity (immutable) and its live
// state (atomics, safe for concurrent use).
type Endpoint struct {
	spec Spec

	// acquired and released count picks and their ends; in-flight is the
	// difference. Two counters, not three, keep Acquire+Release to two
	// atomic adds on the pick path.
	acquired atomic.Uint64
	released atomic.Uint64
	failures atomic.Uint64
	status   atomic.Pointer[Status]
	observer atomic.Pointer[observerBox]

	done func(Outcome) // prebuilt so that picks do not allocate
}

type observerBox struct{ o Observer }

// New returns a healthy endpoint for spec. A weight below 1 is taken as 1.
func New(spec Spec) *Endpoint {
	if spec.Weight < 1 {
		spec.Weight = 1
	}
	e := &Endpoint{spec: spec}
	e.status.Store(&Status{State: Healthy, Reason: "added", Since: time.Now()})
	e.done = e.Release
	return e
}

// Address is the endpoint's host:port.
func (e *Endpoint) Address() string { return e.spec.Address }

// ID is the endpoint's instance ID: Spec.ID, or the address when that is
// empty.
func (e *Endpoint) ID() string {
	if e.spec.ID != "" {
		return e.spec.ID
	}
	return e.spec.Address
}

// Weight is the configured relative weight (at least 1).
func (e *Endpoint) Weight() int { return e.spec.Weight }

// Zone is the endpoint's zone, if any.
func (e *Endpoint) Zone() string { return e.spec.Zone }

// Meta is the endpoint's metadata. Callers must not modify it.
func (e *Endpoint) Meta() map[string]string { return e.spec.Meta }

// Spec returns the description the endpoint was built from.
func (e *Endpoint) Spec() Spec { return e.spec }

// InFlight is the number of picks not yet released.
func (e *Endpoint) InFlight() int64 {
	// Read released first: a Release between the loads can then only make
	// the result larger, never negative.
	r := e.released.Load()
	return int64(e.acquired.Load() - r)
}

// Requests counts released picks.
func (e *Endpoint) Requests() uint64 { return e.released.Load() }

// Failures counts released picks whose outcome Failed.
func (e *Endpoint) Failures() uint64 { return e.failures.Load() }

// Status returns the endpoint's current state, reason and since-time.
func (e *Endpoint) Status() Status { return *e.status.Load() }

// State returns the endpoint's current state.
func (e *Endpoint) State() State { return e.status.Load().State }

// SetStatus changes the endpoint's state. It reports whether the state
// changed; the caller (the pool's owner) then rebuilds the pool's snapshot.
// Setting the state it already has updates the reason but keeps the
// since-time: the state did not begin anew.
func (e *Endpoint) SetStatus(s State, reason string, now time.Time) bool {
	old := e.status.Load()
	if old.State == s {
		if old.Reason != reason {
			e.status.Store(&Status{State: s, Reason: reason, Since: old.Since})
		}
		return false
	}
	e.status.Store(&Status{State: s, Reason: reason, Since: now})
	return true
}

// SetObserver installs the observer that receives this endpoint's outcomes
// (nil removes it).
func (e *Endpoint) SetObserver(o Observer) {
	if o == nil {
		e.observer.Store(nil)
		return
	}
	e.observer.Store(&observerBox{o})
}

// Acquire marks the start of one use of the endpoint. Balancers call it when
// they pick; every Acquire is matched by exactly one Release.
func (e *Endpoint) Acquire() { e.acquired.Add(1) }

// Release ends one use of the endpoint and reports its outcome.
func (e *Endpoint) Release(o Outcome) {
	e.released.Add(1)
	if o.Failed() {
		e.failures.Add(1)
	}
	if b := e.observer.Load(); b != nil {
		b.o.Observe(e, o)
	}
}

// DoneFunc returns Release as a func value built once per endpoint, so that
// a pick can hand it out without allocating.
func (e *Endpoint) DoneFunc() func(Outcome) { return e.done }
