package health

// Passive health (outlier detection).
//
// A Detector watches the outcomes of real requests (it is an
// endpoint.Observer) and ejects endpoints that misbehave, following Envoy's
// outlier detection (architecture overview "Outlier detection" and
// config.cluster.v3.OutlierDetection):
//
//   - consecutive failures: ConsecutiveFailures failures in a row eject. A
//     failure is a transport error (connect, timeout, reset) that is not the
//     caller's own cancellation, or a status in FailureStatuses (by default
//     502, 503, 504, Envoy's "gateway failures"). Any other answer resets the
//     count.
//   - failure rate: over a sliding Window, at least MinRequests requests of
//     which at least FailureRate failed (Envoy's failure_percentage with its
//     request_volume). It is checked on each failure, inline.
//   - latency outliers: an endpoint whose median latency over the Window is
//     above LatencyFactor × the median of the pool's endpoint medians. That
//     needs every endpoint's numbers, so Tick checks it, not Observe.
//
// An ejection lasts BaseEjection × the number of times the endpoint has been
// ejected, capped at MaxEjection (Envoy's rule). The count also decays, a
// rule of ours (recent Envoy docs describe a similar decrement, not checked
// in detail): every BaseEjection an endpoint spends healthy takes one off,
// so a node that failed once a week ago starts again at BaseEjection.
// No more than MaxEjectedPercent of the pool is ejected at once (see
// outlierMaxEjected for the rounding).
//
// Time does not pass by itself: the integrator calls Tick(now) periodically
// (every second is plenty; Run does it with a ticker). Tick moves endpoints
// whose ejection time is over to Probation and checks latency outliers. A
// Tick method rather than time.AfterFunc keeps every decision on explicit
// time, so tests drive it without sleeping, and keeps timers out of the
// request path. On Probation an endpoint needs RecoverySuccesses successes in
// a row to be Healthy again; one failure ejects it again at once, for longer.
//
// The Detector does not call SetStatus: it reports each transition to its
// OnChange callback with a human reason, and the integrator combines it
// with active health and the breaker into the endpoint's one state. ApplyTo
// builds a callback that sets the state directly, for use without the
// rest. Outcomes reported while an endpoint is ejected (requests that were in
// flight when it was ejected) are ignored.
//
// The request path (Observe) does not allocate. A success of a healthy
// endpoint with no run of failures, almost every request, reads the
// endpoint's state with one atomic load and counts itself in its CPU's
// shard of the endpoint's window (see outlierWindow), so that CPUs
// recording the same endpoint at once share no lock and write no common
// cache line. Any other outcome takes the endpoint's own small mutex; the
// detector-wide mutex is taken only to make a decision, which is rare.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/pshard"
)

// PassiveConfig configures a Detector. The yaml tags are the keys of an
// upstream's health.passive block, and the field comments are their
// reference. The zero value of every field means its default; Validate
// reports every value that cannot work as a *field.Error naming the key.
type PassiveConfig struct {
	// Enabled false turns passive ejection off, and the other keys must
	// then be left out. Default true. (switchboard's configuration gives
	// every upstream passive ejection unless its health block turns it off
	// this way; see docs/health.md.)
	Enabled *bool `yaml:"enabled"`
	// ConsecutiveFailures is how many failures in a row eject an endpoint.
	// Default 5.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// FailureStatuses are the HTTP statuses that count as failures.
	// Transport errors always count. Default (nil) is 502, 503, 504; an
	// empty, non-nil slice (failure_statuses: []) makes no status count.
	FailureStatuses []int `yaml:"failure_statuses"`
	// BaseEjection is the first ejection's length; the k-th lasts k times
	// as long. Default 30s.
	BaseEjection time.Duration `yaml:"base_ejection"`
	// MaxEjection caps an ejection's length. Default 300s (or BaseEjection,
	// if that is longer).
	MaxEjection time.Duration `yaml:"max_ejection"`
	// MaxEjectedPercent bounds the share of the pool's endpoints that may be
	// ejected at once, rounded down, but at least one endpoint in a pool of
	// two or more. 1 to 100; default 50.
	MaxEjectedPercent int `yaml:"max_ejected_percent"`
	// FailureRate ejects an endpoint whose share of failed requests over
	// Window reaches it (0.5 is half), once it had MinRequests requests.
	// 0 (default) turns failure-rate ejection off.
	FailureRate float64 `yaml:"failure_rate"`
	// Window is the sliding window of the failure rate and of latency
	// outliers, kept in ten buckets. Default 10s.
	Window time.Duration `yaml:"window"`
	// MinRequests is the number of requests in the window an endpoint needs
	// before its failure rate, or its median latency, is judged. Default 20.
	MinRequests int `yaml:"min_requests"`
	// RecoverySuccesses is how many successes in a row an endpoint on
	// probation needs to be healthy again. Default 2.
	RecoverySuccesses int `yaml:"recovery_successes"`
	// LatencyFactor ejects an endpoint whose median latency over Window is
	// more than this many times the pool's median (the median of the
	// endpoints' medians, over those with MinRequests successes, when there
	// are at least three). Must be above 1; 0 (default) turns it off.
	LatencyFactor float64 `yaml:"latency_factor"`
}

// Defaults of PassiveConfig.
const (
	DefaultConsecutiveFailures = 5
	DefaultBaseEjection        = 30 * time.Second
	DefaultMaxEjection         = 300 * time.Second
	DefaultMaxEjectedPercent   = 50
	DefaultWindow              = 10 * time.Second
	DefaultMinRequests         = 20
	DefaultRecoverySuccesses   = 2
)

// defaultFailureStatuses are Envoy's gateway failures.
var defaultFailureStatuses = []int{502, 503, 504}

// Validate reports every field that cannot work, or nil: a *field.Error
// per problem, joined, each naming its yaml key.
func (c PassiveConfig) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	if c.Off() {
		if !reflect.DeepEqual(c, PassiveConfig{Enabled: c.Enabled}) {
			bad("enabled", "is false: passive ejection is off, so its other keys would do nothing; leave them out")
		}
		return errors.Join(errs...)
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"consecutive_failures", c.ConsecutiveFailures}, {"min_requests", c.MinRequests}, {"recovery_successes", c.RecoverySuccesses}} {
		if n.v < 0 {
			bad(n.key, "must be at least 1, got %d", n.v)
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"base_ejection", c.BaseEjection}, {"max_ejection", c.MaxEjection}, {"window", c.Window}} {
		if d.v < 0 {
			bad(d.key, "must be positive, got %v", d.v)
		}
	}
	if c.MaxEjectedPercent < 0 || c.MaxEjectedPercent > 100 {
		bad("max_ejected_percent", "must be 1 to 100, got %d", c.MaxEjectedPercent)
	}
	if math.IsNaN(c.FailureRate) || c.FailureRate < 0 || c.FailureRate > 1 {
		bad("failure_rate", "must be between 0 (off) and 1, got %v", c.FailureRate)
	}
	if math.IsNaN(c.LatencyFactor) || c.LatencyFactor < 0 || (c.LatencyFactor > 0 && c.LatencyFactor <= 1) {
		bad("latency_factor", "must be above 1, or 0 (off), got %v", c.LatencyFactor)
	}
	for i, s := range c.FailureStatuses {
		if s < 100 || s > 599 {
			bad(fmt.Sprintf("failure_statuses[%d]", i), "%d is not an HTTP status", s)
		}
	}
	// The settings that bound each other, with their defaults.
	d := c.withDefaults()
	if c.BaseEjection >= 0 && c.MaxEjection >= 0 && d.MaxEjection < d.BaseEjection {
		bad("max_ejection", "%v is below base_ejection %v", d.MaxEjection, d.BaseEjection)
	}
	if c.Window >= 0 && d.Window < outlierBuckets*time.Millisecond {
		bad("window", "must be at least %v, got %v", outlierBuckets*time.Millisecond, d.Window)
	}
	return errors.Join(errs...)
}

// Off reports whether c turns passive ejection off (Enabled false).
func (c PassiveConfig) Off() bool { return c.Enabled != nil && !*c.Enabled }

func (c PassiveConfig) withDefaults() PassiveConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ConsecutiveFailures, DefaultConsecutiveFailures)
	def(&c.MaxEjectedPercent, DefaultMaxEjectedPercent)
	def(&c.MinRequests, DefaultMinRequests)
	def(&c.RecoverySuccesses, DefaultRecoverySuccesses)
	if c.BaseEjection == 0 {
		c.BaseEjection = DefaultBaseEjection
	}
	if c.MaxEjection == 0 {
		c.MaxEjection = max(DefaultMaxEjection, c.BaseEjection)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.FailureStatuses == nil {
		c.FailureStatuses = slices.Clone(defaultFailureStatuses)
	}
	return c
}

// DetectorOption sets one of a Detector's rarely needed knobs.
type DetectorOption func(*Detector)

// WithDetectorClock makes the Detector read time from now instead of
// time.Now (for tests). Observe calls it once per outcome, and once more
// when it makes a decision; Run still ticks on real time and calls it at
// each tick.
func WithDetectorClock(now func() time.Time) DetectorOption {
	return func(d *Detector) { d.clock = clock.WithNow(clock.Real, now) }
}

// WithDetectorOnChange sets the callback that receives every transition the
// Detector decides: the endpoint, its new state (endpoint.Ejected,
// endpoint.Probation or endpoint.Healthy), a human reason and the time.
// Callbacks are delivered one at a time, in order, outside the Detector's
// locks, on the goroutine that caused them (a request's, or Tick's). They
// may call Update, but not Observe or Tick.
func WithDetectorOnChange(fn func(ep *endpoint.Endpoint, state endpoint.State, reason string, now time.Time)) DetectorOption {
	return func(d *Detector) { d.onChange = fn }
}

// WithDetectorFailureSignal sets a callback called on the request path when
// an endpoint's run of failures begins (its first failure after a success)
// and when it fails on probation. Wire it to active health to snap the
// endpoint's check interval back. It must be cheap and must not block.
func WithDetectorFailureSignal(fn func(ep *endpoint.Endpoint)) DetectorOption {
	return func(d *Detector) { d.onFailure = fn }
}

// Detector is passive health for one pool. Create it with NewDetector, give
// it the pool's endpoints with Update, install it as each endpoint's
// observer (or call Observe from one that is), and call Tick periodically.
//
// An endpoint's window is kept per CPU, so that CPUs recording its
// outcomes at once do not contend: an endpoint costs about 320 bytes per
// CPU (GOMAXPROCS when the Detector is made, rounded up to a power of
// two, at most 8), and with LatencyFactor set about 4.4 KB per CPU, for
// its latency histograms: on 2 CPUs 0.7 KB or 9 KB an endpoint, at most
// 2.5 KB or 36 KB however many CPUs.
type Detector struct {
	cfg       PassiveConfig
	statusSet [10]uint64  // bit s set when status s counts as a failure
	clock     clock.Clock // clock.Real, or what WithDetectorClock made
	onChange  func(*endpoint.Endpoint, endpoint.State, string, time.Time)
	onFailure func(*endpoint.Endpoint)
	shards    int // of each endpoint's window (see outlierWindow), fixed at creation

	// eps is replaced, never modified, so Observe reads it without a lock.
	eps atomic.Pointer[map[*endpoint.Endpoint]*outlierState]
	// ejected mirrors the number of ejected endpoints and total the pool
	// size, so that a failing endpoint held back by MaxEjectedPercent does
	// not take mu on every failure.
	ejected atomic.Int32
	total   atomic.Int32

	mu      sync.Mutex // decisions and membership; held briefly, never while calling out
	order   []*endpoint.Endpoint
	pending []outlierChange

	notifyMu sync.Mutex // serialises OnChange deliveries
}

type outlierChange struct {
	ep     *endpoint.Endpoint
	state  endpoint.State
	reason string
	at     time.Time
}

// outlierState is the Detector's view of one endpoint. mu guards its
// fields and every write of hot; transitions also hold Detector.mu (taken
// first). The window has locks of its own, taken after mu.
type outlierState struct {
	// hot packs the state (Healthy, Ejected or Probation) in its low byte
	// and the run of consecutive failures above it, so that Observe's
	// common case reads both with one load: hot is quietHot exactly when
	// the endpoint is Healthy with no failure run, and only failures and
	// transitions write it, so the CPUs observing it share its line
	// without moving it.
	hot atomic.Uint64

	mu         sync.Mutex
	lastErr    error
	lastStatus int
	probeOK    int
	win        outlierWindow

	ejections    int       // the k in base × k
	until        time.Time // end of the current ejection
	healthySince time.Time // when it last became healthy after probation
}

// quietHot is outlierState.hot of a Healthy endpoint with no failure run.
const quietHot = uint64(endpoint.Healthy)

func (st *outlierState) state() endpoint.State { return endpoint.State(st.hot.Load()) }

func (st *outlierState) consec() int { return int(st.hot.Load() >> 8) }

// set stores state and consec; st.mu is held.
func (st *outlierState) set(state endpoint.State, consec int) {
	st.hot.Store(uint64(consec)<<8 | uint64(state))
}

// NewDetector returns a Detector for cfg (defaults filled in), or cfg's
// validation error.
func NewDetector(cfg PassiveConfig, opts ...DetectorOption) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Detector{cfg: cfg.withDefaults(), clock: clock.Real}
	for _, s := range d.cfg.FailureStatuses {
		d.statusSet[s/64] |= 1 << (s % 64)
	}
	for _, o := range opts {
		o(d)
	}
	d.shards = pshard.Count(runtime.GOMAXPROCS(0), maxOutlierShards)
	empty := map[*endpoint.Endpoint]*outlierState{}
	d.eps.Store(&empty)
	return d, nil
}

// Config returns the configuration in effect, defaults filled in.
func (d *Detector) Config() PassiveConfig { return d.cfg }

// Update sets the pool's membership. Endpoints that stay outlierKeep their history;
// new ones start healthy; removed ones are forgotten (freeing their place in
// the ejection budget). Subscribe it to the pool:
//
//	pool.Subscribe(func(s *endpoint.Set) { d.Update(s.All) })
func (d *Detector) Update(eps []*endpoint.Endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Equal(eps, d.order) {
		return // a republished snapshot after a state outlierChange
	}
	old := *d.eps.Load()
	next := make(map[*endpoint.Endpoint]*outlierState, len(eps))
	for _, ep := range eps {
		st := old[ep]
		if st == nil {
			st = &outlierState{win: newOutlierWindow(d.cfg.Window, d.cfg.LatencyFactor > 0, d.shards)}
			st.set(endpoint.Healthy, 0)
		}
		next[ep] = st
	}
	var ejected int32
	for _, st := range next {
		if st.state() == endpoint.Ejected { // changes only under d.mu
			ejected++
		}
	}
	d.order = slices.Clone(eps)
	d.eps.Store(&next)
	d.ejected.Store(ejected)
	d.total.Store(int32(len(eps)))
}

// State returns the Detector's outlierVerdict on ep (Healthy, Ejected or
// Probation), and false if ep is not in the pool.
func (d *Detector) State(ep *endpoint.Endpoint) (endpoint.State, bool) {
	st := (*d.eps.Load())[ep]
	if st == nil {
		return endpoint.Healthy, false
	}
	return st.state(), true
}

func (d *Detector) failed(o endpoint.Outcome) bool {
	if o.Err != nil {
		return true
	}
	s := o.Status
	return s > 0 && s < 640 && d.statusSet[s/64]&(1<<(s%64)) != 0
}

type outlierVerdict uint8

const (
	outlierKeep outlierVerdict = iota
	outlierConsecutive
	outlierRate
	outlierProbationFailure
	outlierRecovered
)

// Observe records one outcome of ep. It is the request path: a success
// of a Healthy endpoint with no run of failures takes only the lock of
// its CPU's shard of ep's window; any other outcome takes ep's own mutex,
// and the Detector's only when a decision is due.
func (d *Detector) Observe(ep *endpoint.Endpoint, o endpoint.Outcome) {
	if o.Canceled {
		return // the caller gave up; says nothing about the endpoint
	}
	st := (*d.eps.Load())[ep]
	if st == nil {
		return
	}
	now := d.outcomeNanos(o)
	failed := d.failed(o)
	if !failed && st.hot.Load() == quietHot {
		// hot is checked again under the shard's lock: a failure stores
		// its count before it sums the shards, and an ejection its state
		// before it empties them, so this success is either in the sums
		// and emptied with the window, or sees the change and takes the
		// slow path, as if both had taken one lock.
		s := st.win.lock()
		if st.hot.Load() == quietHot {
			st.win.add(s, now, false, o.Latency)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	d.observeLocked(ep, st, o, now, failed)
}

// observeLocked is Observe for every outcome but a success of a quiet
// endpoint: under st.mu.
func (d *Detector) observeLocked(ep *endpoint.Endpoint, st *outlierState, o endpoint.Outcome, now int64, failed bool) {
	v := outlierKeep
	signal := false

	st.mu.Lock()
	state, consec := st.state(), st.consec()
	if state == endpoint.Ejected {
		st.mu.Unlock()
		return
	}
	if failed {
		consec++
		st.set(state, consec) // before the window's sums: see Observe
		st.lastErr, st.lastStatus = o.Err, o.Status
		signal = consec == 1
	} else if consec != 0 {
		st.set(state, 0)
	}
	s := st.win.lock()
	st.win.add(s, now, failed, o.Latency)
	s.mu.Unlock()
	if failed {
		switch {
		case state == endpoint.Probation:
			v = outlierProbationFailure
		case consec >= d.cfg.ConsecutiveFailures:
			v = outlierConsecutive
		case d.cfg.FailureRate > 0:
			if req, fail := st.win.sums(now); req >= uint64(d.cfg.MinRequests) && float64(fail) >= d.cfg.FailureRate*float64(req) {
				v = outlierRate
			}
		}
	} else if state == endpoint.Probation {
		st.probeOK++
		if st.probeOK >= d.cfg.RecoverySuccesses {
			v = outlierRecovered
		}
	}
	st.mu.Unlock()

	if signal && d.onFailure != nil {
		d.onFailure(ep)
	}
	if v == outlierKeep {
		return
	}
	if v != outlierRecovered && !d.budgetLeft() {
		// Held back by MaxEjectedPercent; on probation it must start its
		// run of successes again.
		if v == outlierProbationFailure {
			st.mu.Lock()
			st.probeOK = 0
			st.mu.Unlock()
		}
		return
	}
	d.decide(ep, st, v, now, d.clock.Now())
	d.flush()
}

// unixEpoch is the process's clock epoch (package clock) in Unix
// nanoseconds: the offset of the windows' timeline (see nanos).
var unixEpoch = clock.Time(0).UnixNano()

// nanos is the current time on the windows' timeline: nanoseconds since
// the process's clock epoch, read from the monotonic clock alone on the
// real clock (clock.NowNanos), offset by the epoch's Unix time. The offset
// keeps the buckets on the boundaries the wall clock's Unix nanoseconds
// gave them, and the timeline positive, for any clock a test sets.
func (d *Detector) nanos() int64 { return clock.NowNanos(d.clock) + unixEpoch }

// outcomeNanos is o's time on the windows' timeline: its At, the reading
// of the clock its caller took (endpoint.Nanotime), when the Detector runs
// on the real clock, so that an outcome costs no second reading; else now.
func (d *Detector) outcomeNanos(o endpoint.Outcome) int64 {
	if o.At != 0 && d.clock == clock.Real {
		return timeline(endpoint.TimeOf(o.At))
	}
	return d.nanos()
}

// timeline is t on the windows' timeline (see nanos).
func timeline(t time.Time) int64 { return clock.Nanos(t) + unixEpoch }

func (d *Detector) budgetLeft() bool {
	return int(d.ejected.Load()) < outlierMaxEjected(int(d.total.Load()), d.cfg.MaxEjectedPercent)
}

// decide re-checks outlierVerdict v under the locks (another goroutine may have
// decided first) and applies it. tl is now on the windows' timeline.
func (d *Detector) decide(ep *endpoint.Endpoint, st *outlierState, v outlierVerdict, tl int64, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if (*d.eps.Load())[ep] != st {
		return // left the pool meanwhile
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch v {
	case outlierRecovered:
		if st.state() != endpoint.Probation || st.probeOK < d.cfg.RecoverySuccesses {
			return
		}
		st.set(endpoint.Healthy, st.consec())
		st.healthySince = now
		d.pending = append(d.pending, outlierChange{ep, endpoint.Healthy,
			fmt.Sprintf("healthy: %d successes on probation", st.probeOK), now})
		return
	case outlierProbationFailure:
		if st.state() != endpoint.Probation {
			return
		}
		d.ejectLocked(ep, st, now, fmt.Sprintf("failed on probation (%s)", describeOutlierFailure(st.lastErr, st.lastStatus)))
	case outlierConsecutive:
		if st.state() == endpoint.Ejected || st.consec() < d.cfg.ConsecutiveFailures {
			return
		}
		d.ejectLocked(ep, st, now, fmt.Sprintf("%d consecutive failures (last: %s)", st.consec(), describeOutlierFailure(st.lastErr, st.lastStatus)))
	case outlierRate:
		if st.state() == endpoint.Ejected {
			return
		}
		req, fail := st.win.sums(tl)
		d.ejectLocked(ep, st, now, fmt.Sprintf("failure rate %.0f%% (%d of %d) over %v", 100*float64(fail)/float64(req), fail, req, d.cfg.Window))
	}
}

// ejectLocked ejects st if the budget allows. Both locks are held.
func (d *Detector) ejectLocked(ep *endpoint.Endpoint, st *outlierState, now time.Time, why string) bool {
	if int(d.ejected.Load()) >= outlierMaxEjected(len(d.order), d.cfg.MaxEjectedPercent) {
		if st.state() == endpoint.Probation {
			st.probeOK = 0
		}
		return false
	}
	k := st.ejections
	if !st.healthySince.IsZero() {
		k -= int(now.Sub(st.healthySince) / d.cfg.BaseEjection)
		k = max(k, 0)
	}
	k++
	st.ejections = k
	st.until = now.Add(outlierEjectionTime(d.cfg.BaseEjection, d.cfg.MaxEjection, k))
	st.set(endpoint.Ejected, 0) // before the window empties: see Observe
	st.probeOK, st.lastErr, st.lastStatus = 0, nil, 0
	st.healthySince = time.Time{}
	st.win.reset()
	d.ejected.Add(1)
	d.pending = append(d.pending, outlierChange{ep, endpoint.Ejected,
		fmt.Sprintf("ejected: %s at %s, until %s", why, now.Format(time.TimeOnly), st.until.Format(time.TimeOnly)), now})
	return true
}

// Tick moves endpoints whose ejection time is over to Probation and, when
// LatencyFactor is set, ejects latency outliers. Call it periodically with
// the current time; Run does.
func (d *Detector) Tick(now time.Time) {
	d.mu.Lock()
	m := *d.eps.Load()
	for _, ep := range d.order {
		st := m[ep]
		st.mu.Lock()
		if st.state() == endpoint.Ejected && !now.Before(st.until) {
			st.set(endpoint.Probation, 0)
			st.probeOK = 0
			d.ejected.Add(-1)
			d.pending = append(d.pending, outlierChange{ep, endpoint.Probation, "probation: ejection time over", now})
		}
		st.mu.Unlock()
	}
	if d.cfg.LatencyFactor > 0 {
		d.latencyOutliersLocked(m, now)
	}
	d.mu.Unlock()
	d.flush()
}

// Uneject ends ep's ejection now, as when an active health check sees the
// endpoint healthy again (Envoy's successful_active_health_check_uneject_host):
// the endpoint goes on probation and must still prove itself on traffic.
// An endpoint that is not ejected is left alone.
func (d *Detector) Uneject(ep *endpoint.Endpoint, why string, now time.Time) {
	d.mu.Lock()
	if st := (*d.eps.Load())[ep]; st != nil {
		st.mu.Lock()
		if st.state() == endpoint.Ejected {
			st.set(endpoint.Probation, 0)
			st.probeOK = 0
			d.ejected.Add(-1)
			d.pending = append(d.pending, outlierChange{ep, endpoint.Probation, "probation: " + why, now})
		}
		st.mu.Unlock()
	}
	d.mu.Unlock()
	d.flush()
}

// latencyOutliersLocked ejects endpoints whose median latency is above
// LatencyFactor × the median of the medians. A median of medians, unlike a
// mean, is not dragged up by the outlier it is meant to expose. Three
// endpoints with enough samples are needed: with two, "the pool" is just the
// other one.
func (d *Detector) latencyOutliersLocked(m map[*endpoint.Endpoint]*outlierState, now time.Time) {
	type sample struct {
		ep  *endpoint.Endpoint
		med time.Duration
	}
	var samples []sample
	for _, ep := range d.order {
		st := m[ep]
		st.mu.Lock()
		if st.state() != endpoint.Ejected {
			if med, n := st.win.median(timeline(now)); n >= uint64(d.cfg.MinRequests) {
				samples = append(samples, sample{ep, med})
			}
		}
		st.mu.Unlock()
	}
	if len(samples) < 3 {
		return
	}
	meds := make([]time.Duration, len(samples))
	for i, s := range samples {
		meds[i] = s.med
	}
	slices.Sort(meds)
	pool := meds[len(meds)/2]
	if len(meds)%2 == 0 {
		pool = (meds[len(meds)/2-1] + pool) / 2
	}
	limit := time.Duration(d.cfg.LatencyFactor * float64(pool))
	for _, s := range samples {
		if s.med <= limit {
			continue
		}
		st := m[s.ep]
		st.mu.Lock()
		d.ejectLocked(s.ep, st, now, fmt.Sprintf("median latency %v > %g x pool median %v over %v",
			roundLatency(s.med), d.cfg.LatencyFactor, roundLatency(pool), d.cfg.Window))
		st.mu.Unlock()
	}
}

// Run calls Tick every interval until ctx is done. interval must be positive.
func (d *Detector) Run(ctx context.Context, interval time.Duration) {
	t := d.clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			d.Tick(d.clock.Now())
		}
	}
}

// flush delivers pending transitions outside mu, one at a time and in
// order: OnChange may publish a pool snapshot, whose subscribers call
// Update, which takes mu.
func (d *Detector) flush() {
	d.notifyMu.Lock()
	defer d.notifyMu.Unlock()
	for {
		d.mu.Lock()
		evs := d.pending
		d.pending = nil
		d.mu.Unlock()
		if len(evs) == 0 {
			return
		}
		if d.onChange == nil {
			continue
		}
		for _, ev := range evs {
			d.onChange(ev.ep, ev.state, ev.reason, ev.at)
		}
	}
}

// ApplyTo returns an OnChange callback for using passive health alone: it
// sets the endpoint's state and publishes a new snapshot of pool when the
// state changed. With active health or a breaker as well, combine the
// signals instead.
func ApplyTo(pool *endpoint.Pool) func(ep *endpoint.Endpoint, state endpoint.State, reason string, now time.Time) {
	return func(ep *endpoint.Endpoint, state endpoint.State, reason string, now time.Time) {
		if ep.SetStatus(state, reason, now) {
			pool.Refresh()
		}
	}
}
