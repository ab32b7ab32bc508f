package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// ErrOpen is returned by Allow and Do when the breaker is open, or
// half-open with every probe slot taken.
var ErrOpen = errors.New("breaker: open")

// State is a breaker's state.
type State uint8

// The states of a breaker.
const (
	Closed   State = iota // calls go through and are counted
	Open                  // calls are refused with ErrOpen
	HalfOpen              // a few probe calls go through
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Verdict is what a Classifier makes of an outcome.
type Verdict uint8

// The verdicts of a Classifier.
const (
	Success Verdict = iota
	Failure
	// Ignore is for outcomes that say nothing about the dependency, like
	// the caller's own cancellation: they count neither way.
	Ignore
)

// Classifier decides whether an outcome is a success, a failure, or to be
// ignored. It runs on the request path and must not block. Slowness is
// judged apart from it, against Config.SlowThreshold.
type Classifier func(endpoint.Outcome) Verdict

// Option is a rarely needed knob of New.
type Option func(*Breaker)

// WithClassifier replaces the default classifier (see New).
func WithClassifier(c Classifier) Option { return func(b *Breaker) { b.classify = c } }

// Listener is told of each state change with its reason, for example
// "open: failure rate 62% over 100 calls", and the time it happened.
type Listener func(from, to State, reason string, at time.Time)

// Breaker is a circuit breaker. It is safe for concurrent use; create it
// with New.
type Breaker struct {
	cfg      settings
	classify Classifier // nil: the default, inlined in Done

	// cur is the phase the breaker is in. Allow and Done read it without
	// a lock; it changes only under mu.
	cur atomic.Pointer[phase]

	mu        sync.Mutex
	openFor   time.Duration // the current open period, doubled on each reopen
	listeners []Listener    // copied on write; read under mu, called outside it
	// pending are the transitions not yet announced, in the order they
	// happened (under mu); draining is set while a goroutine announces
	// them, one at a time, outside mu (see drain).
	pending  []transition
	draining bool
}

// phase is one stretch of a breaker's life in one state, from the
// transition into it to the transition out. Every transition publishes a
// new phase, so a Ticket holds the phase that admitted it: its outcome
// counts only while that phase is current, which replaces a generation
// check (see the windows in window.go).
type phase struct {
	b     *Breaker
	state State

	// Open: when it opened and for how long. Immutable.
	openedAt time.Time
	openFor  time.Duration

	// Half-open: probe slots handed out and probes succeeded, under b.mu.
	// full mirrors probes == half_open_probes for Allow's lock-free refusal.
	probes, probesOK int
	full             atomic.Bool

	// Closed: the run of failures and the window (one of the two, by
	// window_type), written without a lock. consecutive is read by every
	// success and written only by failures, so it stays on the read-mostly
	// side of the count window's padding.
	consecutive atomic.Int64
	tw          *timeWindow
	cw          countWindow
}

// New returns a closed breaker for cfg, or cfg's validation error. The
// default classifier counts as failures: an outcome with an error (a
// timeout included) unless Canceled, which it ignores; and an outcome whose
// status is in cfg.FailureStatuses (default 500-599).
func New(cfg Config, opts ...Option) (*Breaker, error) {
	s, err := cfg.build()
	if err != nil {
		return nil, err
	}
	b := &Breaker{cfg: s, openFor: s.OpenFor}
	for _, o := range opts {
		o(b)
	}
	b.cur.Store(b.newPhase(Closed))
	return b, nil
}

// newPhase returns a fresh phase in state st: for Closed, with an empty
// window.
func (b *Breaker) newPhase(st State) *phase {
	p := &phase{b: b, state: st}
	if st == Closed {
		if b.cfg.WindowType == WindowTime {
			p.tw = newTimeWindow(int64(b.cfg.Window)/int64(b.cfg.Buckets), b.cfg.Buckets)
		} else {
			p.cw = newCountWindow(b.cfg.WindowSize)
		}
	}
	return p
}

// verdict is the default classifier.
func (s *settings) verdict(o *endpoint.Outcome) Verdict {
	switch {
	case o.Canceled:
		return Ignore
	case o.Err != nil, s.statuses.has(o.Status):
		return Failure
	}
	return Success
}

// OnStateChange adds a listener called once per transition, after the
// breaker's lock is released (so it may call the breaker). Listeners are
// called one transition at a time, in the order the transitions happened,
// so the announced sequence is a path through the state machine; a
// transition that races one being announced is announced right after it,
// by the goroutine announcing (so not necessarily before the call that
// made it returns).
func (b *Breaker) OnStateChange(l Listener) {
	b.mu.Lock()
	ls := make([]Listener, len(b.listeners), len(b.listeners)+1)
	copy(ls, b.listeners)
	b.listeners = append(ls, l)
	b.mu.Unlock()
}

// Ticket is Allow's admission of one call. Report the call's outcome
// through Done exactly once. It is a value so that admitting a call does
// not allocate.
type Ticket struct {
	p *phase // the phase that admitted the call; a probe when half-open
}

// transition is a state change to announce once the lock is released.
type transition struct {
	from, to  State
	reason    string
	at        time.Time
	listeners []Listener
	b         *Breaker // set on the value setLocked returns: announce drains
}

// announce announces the transitions pending on the breaker, this one
// among them, unless another goroutine is at it (see drain).
func (t *transition) announce() {
	if t.b != nil {
		t.b.drain()
	}
}

// drain calls the listeners of the pending transitions, in order, one
// transition at a time, outside mu. A goroutine that finds a drain under
// way leaves its transition to it; so does a listener whose call makes a
// transition (it is announced when the listener returns).
func (b *Breaker) drain() {
	b.mu.Lock()
	if b.draining {
		b.mu.Unlock()
		return
	}
	b.draining = true
	for len(b.pending) > 0 {
		tr := b.pending[0]
		b.pending[0] = transition{}
		b.pending = b.pending[1:]
		b.mu.Unlock()
		b.call(tr)
		b.mu.Lock()
	}
	b.pending = b.pending[:0:0]
	b.draining = false
	b.mu.Unlock()
}

// call runs tr's listeners; a listener that panics ends the drain so that
// later transitions are still announced.
func (b *Breaker) call(tr transition) {
	defer func() {
		if r := recover(); r != nil {
			b.mu.Lock()
			b.draining = false
			b.mu.Unlock()
			panic(r)
		}
	}()
	for _, l := range tr.listeners {
		l(tr.from, tr.to, tr.reason, tr.at)
	}
}

// Allow admits one call at now, or returns ErrOpen. An admitted call's
// outcome must be reported with Ticket.Done.
func (b *Breaker) Allow(now time.Time) (Ticket, error) {
	// Closed, and open before its period ends, are decided without the
	// lock. A call admitted on a phase that ends right after the load is
	// harmless: its outcome goes to that phase, which nobody reads.
	p := b.cur.Load()
	switch {
	case p.state == Closed:
		return Ticket{p}, nil
	case p.state == Open && now.Sub(p.openedAt) < p.openFor,
		p.state == HalfOpen && p.full.Load():
		return Ticket{}, ErrOpen
	}
	return b.allowLocked(now)
}

func (b *Breaker) allowLocked(now time.Time) (Ticket, error) {
	b.mu.Lock()
	p := b.cur.Load()
	var tr transition
	switch p.state {
	case Closed:
		b.mu.Unlock()
		return Ticket{p}, nil
	case Open:
		if now.Sub(p.openedAt) < p.openFor {
			b.mu.Unlock()
			return Ticket{}, ErrOpen
		}
		tr = b.halfOpenLocked(now)
		p = b.cur.Load()
	}
	if p.probes >= b.cfg.HalfOpenProbes {
		b.mu.Unlock()
		return Ticket{}, ErrOpen
	}
	p.probes++
	p.full.Store(p.probes >= b.cfg.HalfOpenProbes)
	b.mu.Unlock()
	if tr.listeners != nil {
		tr.announce()
	}
	return Ticket{p}, nil
}

// State returns the breaker's state at now: an open breaker whose open
// period has elapsed is half-open.
func (b *Breaker) State(now time.Time) State {
	p := b.cur.Load()
	if p.state != Open || now.Sub(p.openedAt) < p.openFor {
		return p.state
	}
	b.mu.Lock()
	p = b.cur.Load()
	if p.state != Open || now.Sub(p.openedAt) < p.openFor {
		b.mu.Unlock()
		return p.state
	}
	tr := b.halfOpenLocked(now)
	b.mu.Unlock()
	tr.announce()
	return HalfOpen
}

// Done reports the outcome of the call t admitted, finished at now. The
// outcome of a call admitted before the breaker last changed state is
// dropped: it describes a past the breaker has already judged.
func (t Ticket) Done(o endpoint.Outcome, now time.Time) {
	p := t.p
	if p == nil {
		return
	}
	b := p.b
	var v Verdict
	if b.classify == nil {
		v = b.cfg.verdict(&o)
	} else {
		v = b.classify(o)
	}
	slow := b.cfg.SlowThreshold > 0 && o.Latency >= b.cfg.SlowThreshold
	if p.state != Closed {
		b.probeDone(p, v, slow, o.Latency, now)
		return
	}
	if v == Ignore {
		return
	}
	var flags uint32
	if v == Failure {
		flags = flagFailed
	}
	if slow {
		flags |= flagSlow
	}
	p.record(flags, now)
}

// The rules that open a closed breaker, in the order they are checked.
const (
	ruleConsecutive = 1 + iota
	ruleFailureCount
	ruleFailureRate
	ruleSlowRate
)

// cause is the rule a call's outcome met, with the counts it met it at.
// The reason string is built from it only by the call that wins the
// transition.
type cause struct {
	rule uint8
	n    int // consecutive failures, or failures in the window
	c    counts
}

// record adds one outcome to the closed phase p, and opens the breaker if
// that meets a rule. It takes no lock unless it opens the breaker. (It
// returns nothing: a result struct on the request path costs a copy
// through memory.)
func (p *phase) record(flags uint32, now time.Time) {
	b := p.b
	cfg := &b.cfg
	if cfg.ConsecutiveFailures > 0 {
		if flags&flagFailed != 0 {
			if n := p.consecutive.Add(1); n >= int64(cfg.ConsecutiveFailures) {
				b.open(p, cause{rule: ruleConsecutive, n: int(n)}, now)
				return
			}
		} else if p.consecutive.Load() != 0 {
			p.consecutive.Store(0)
		}
	}
	var c counts
	if p.tw != nil {
		if flags == 0 && !cfg.rates {
			// Only failure_count (and consecutive_failures, above) can
			// open the breaker, and a success counts for neither.
			return
		}
		c = p.tw.record(now.UnixNano(), flags)
	} else {
		var changed bool
		if c, changed = p.cw.record(flags); !changed {
			return
		}
	}
	// Rates are compared as the quotient, as documented; a zero count
	// skips the division.
	switch {
	case cfg.FailureCount > 0 && c.failures >= cfg.FailureCount:
		b.open(p, cause{rule: ruleFailureCount, n: c.failures, c: c}, now)
	case c.total < cfg.MinRequests:
	case cfg.FailureRate > 0 && c.failures > 0 && float64(c.failures)/float64(c.total) >= cfg.FailureRate:
		b.open(p, cause{rule: ruleFailureRate, c: c}, now)
	case cfg.SlowThreshold > 0 && c.slow > 0 && float64(c.slow)/float64(c.total) >= cfg.SlowRate:
		b.open(p, cause{rule: ruleSlowRate, c: c}, now)
	}
}

func (w cause) reason(cfg *settings) string {
	c := w.c
	switch w.rule {
	case ruleConsecutive:
		return fmt.Sprintf("open: %d consecutive failures", w.n)
	case ruleFailureCount:
		if cfg.WindowType == WindowTime {
			return fmt.Sprintf("open: %d %s within %v", w.n, plural(w.n, "failure", "failures"), cfg.Window)
		}
		return fmt.Sprintf("open: %d %s within the last %d calls", w.n, plural(w.n, "failure", "failures"), cfg.WindowSize)
	case ruleFailureRate:
		return fmt.Sprintf("open: failure rate %d%% over %d calls", percent(float64(c.failures)/float64(c.total)), c.total)
	default:
		return fmt.Sprintf("open: slow-call rate %d%% over %d calls (at or over %v)", percent(float64(c.slow)/float64(c.total)), c.total, cfg.SlowThreshold)
	}
}

// open opens the breaker for why, if p is still its phase: of calls that
// meet a rule at once, the first to get here opens it and the others find
// a new phase.
func (b *Breaker) open(p *phase, why cause, now time.Time) {
	b.mu.Lock()
	if b.cur.Load() != p {
		b.mu.Unlock()
		return
	}
	tr := b.openLocked(now, b.cfg.OpenFor, why.reason(&b.cfg))
	b.mu.Unlock()
	tr.announce()
}

// probeDone takes the outcome of a probe admitted by the half-open phase
// p, unless the breaker has left p since.
func (b *Breaker) probeDone(p *phase, v Verdict, slow bool, latency time.Duration, now time.Time) {
	b.mu.Lock()
	if b.cur.Load() != p {
		b.mu.Unlock()
		return
	}
	tr := b.probeDoneLocked(p, v, slow, latency, now)
	b.mu.Unlock()
	if tr.listeners != nil {
		tr.announce()
	}
}

func (b *Breaker) probeDoneLocked(p *phase, v Verdict, slow bool, latency time.Duration, now time.Time) transition {
	switch {
	case v == Ignore:
		// The probe told nothing: free its slot for another.
		p.probes--
		p.full.Store(false)
		return transition{}
	case v == Failure:
		d := min(b.openFor*2, b.cfg.MaxOpenFor)
		return b.openLocked(now, d, fmt.Sprintf("open: probe failed, open for %v", d))
	case slow:
		d := min(b.openFor*2, b.cfg.MaxOpenFor)
		return b.openLocked(now, d, fmt.Sprintf("open: probe slow (%v, at or over %v), open for %v", latency, b.cfg.SlowThreshold, d))
	}
	p.probesOK++
	if p.probesOK < b.cfg.HalfOpenProbes {
		return transition{}
	}
	b.openFor = b.cfg.OpenFor
	return b.setLocked(b.newPhase(Closed), now, fmt.Sprintf("closed: %d %s succeeded", p.probesOK, plural(p.probesOK, "probe", "probes")))
}

func (b *Breaker) openLocked(now time.Time, d time.Duration, reason string) transition {
	b.openFor = d
	p := b.newPhase(Open)
	p.openedAt, p.openFor = now, d
	return b.setLocked(p, now, reason)
}

func (b *Breaker) halfOpenLocked(now time.Time) transition {
	return b.setLocked(b.newPhase(HalfOpen), now, fmt.Sprintf("half-open: open for %v elapsed", b.openFor))
}

// setLocked publishes p as the breaker's phase, queues the transition's
// announcement and returns the transition, whose announce (after mu is
// released) drains the queue.
func (b *Breaker) setLocked(p *phase, now time.Time, reason string) transition {
	from := b.cur.Load().state
	b.cur.Store(p)
	ls := b.listeners
	if ls == nil {
		ls = []Listener{} // non-nil marks that a transition happened
	}
	tr := transition{from: from, to: p.state, reason: reason, at: now, listeners: ls}
	if len(b.listeners) > 0 {
		b.pending = append(b.pending, tr)
		tr.b = b
	}
	return tr
}

func percent(r float64) int { return int(math.Round(r * 100)) }

// Do runs fn if the breaker admits a call now, and reports its outcome: its
// error, and its latency for the slow-call rate. An error that is ctx's own
// cancellation (context.Canceled with ctx canceled) is ignored; a deadline
// counts as a failure like any timeout. A panic in fn counts as a failure
// and is re-raised. Do returns ErrOpen without calling fn when the breaker
// refuses the call, else fn's error.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) (err error) {
	// One wall-clock read: the end is the start plus the elapsed time on
	// the monotonic clock, which time.Since reads for about half the cost.
	start := time.Now()
	t, err := b.Allow(start)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished {
			lat := time.Since(start)
			t.Done(endpoint.Outcome{Err: errPanic, Latency: lat}, start.Add(lat))
		}
	}()
	err = fn(ctx)
	finished = true
	lat := time.Since(start)
	t.Done(endpoint.Outcome{
		Err:      err,
		Latency:  lat,
		Canceled: err != nil && errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled,
	}, start.Add(lat))
	return err
}

var errPanic = errors.New("breaker: call panicked")

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
