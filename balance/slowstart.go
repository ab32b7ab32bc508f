package balance

import (
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Slow start. A new or recovered endpoint gets minRampFactor (10%) of its
// weight when it starts serving, rising linearly to 100% over the window.
// "Starts serving" is the Since of its Status when the balancer first sees
// it ready in its current state: an endpoint that leaves the ready set and
// comes back ramps again from its new Since, one that stays ready keeps its
// ramp even if something re-asserts its state. Endpoints already serving
// for longer than the window when a balancer is built do not ramp.
//
// Pick never computes a ramp: a rebuilder rebuilds the policy's immutable
// pick state on every Update and, while any endpoint ramps, again every
// window/20 (at least every rampStepMin) from a timer, so the share grows
// in 20 steps. The timer stops when no endpoint ramps.

const (
	minRampFactor = 0.1
	rampSteps     = 20
	rampStepMin   = 10 * time.Millisecond
)

// rampFactor is the share of its weight that an endpoint serving for
// elapsed gets under a slow start of window.
func rampFactor(elapsed, window time.Duration) float64 {
	if window <= 0 || elapsed >= window {
		return 1
	}
	if elapsed <= 0 {
		return minRampFactor
	}
	return minRampFactor + (1-minRampFactor)*float64(elapsed)/float64(window)
}

type rampState struct {
	state endpoint.State
	since time.Time
}

// rebuilder serialises a policy's rebuilds: Updates, slow-start steps and
// (dynamic_weight) refreshes. Its mutex is never taken on the pick path.
type rebuilder struct {
	window time.Duration // slow start; 0: off
	clock  clock.Clock   // clock.Real; a test seam
	// build publishes new pick state for set; factors holds each ready
	// endpoint's ramp factor, or is nil when none ramps.
	build func(set *endpoint.Set, factors []float64)

	mu    sync.Mutex
	set   *endpoint.Set
	seen  map[*endpoint.Endpoint]rampState
	timer clock.Timer
}

func newRebuilder(window time.Duration, build func(*endpoint.Set, []float64)) *rebuilder {
	return &rebuilder{window: window, clock: clock.Real, build: build}
}

// update makes set the current snapshot and rebuilds from it.
func (r *rebuilder) update(set *endpoint.Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set = set
	r.rebuildLocked(r.clock.Now())
}

// rebuildAt rebuilds from the current snapshot as of now.
func (r *rebuilder) rebuildAt(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set != nil {
		r.rebuildLocked(now)
	}
}

// tryRebuildAt is rebuildAt unless a rebuild is already running, in which
// case it returns at once: that rebuild reads the same state.
func (r *rebuilder) tryRebuildAt(now time.Time) {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if r.set != nil {
		r.rebuildLocked(now)
	}
}

func (r *rebuilder) rebuildLocked(now time.Time) {
	var factors []float64
	ramping := false
	if r.window > 0 {
		factors, ramping = r.factorsLocked(now)
	}
	r.build(r.set, factors)
	switch {
	case ramping && r.timer == nil:
		r.timer = r.clock.AfterFunc(r.step(), r.tick)
	case ramping:
		r.timer.Reset(r.step())
	case r.timer != nil:
		r.timer.Stop()
	}
}

func (r *rebuilder) step() time.Duration { return max(r.window/rampSteps, rampStepMin) }

func (r *rebuilder) tick() { r.rebuildAt(r.clock.Now()) }

// factorsLocked computes the ramp factor of each ready endpoint, or nil
// when none ramps.
func (r *rebuilder) factorsLocked(now time.Time) ([]float64, bool) {
	ready := r.set.Ready
	seen := make(map[*endpoint.Endpoint]rampState, len(ready))
	factors := make([]float64, len(ready))
	ramping := false
	for i, ep := range ready {
		st := ep.Status()
		rs, ok := r.seen[ep]
		if !ok || rs.state != st.State {
			rs = rampState{state: st.State, since: st.Since}
		}
		seen[ep] = rs
		f := 1.0
		if !rs.since.IsZero() {
			f = rampFactor(now.Sub(rs.since), r.window)
		}
		factors[i] = f
		if f < 1 {
			ramping = true
		}
	}
	r.seen = seen
	if !ramping {
		return nil, false
	}
	return factors, true
}
