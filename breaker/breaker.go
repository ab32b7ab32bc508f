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
	classify Classifier

	// stateGen is gen<<2 | state, published for Allow's lock-free fast
	// path in the closed state: admitting a call then costs one atomic load.
	stateGen atomic.Uint64

	mu          sync.Mutex
	state       State
	gen         uint64 // bumped on every transition; stale tickets are dropped
	win         window
	consecutive int
	openedAt    time.Time
	openFor     time.Duration // the current open period, doubled on each reopen
	probes      int           // half-open probe slots handed out
	probesOK    int
	listeners   []Listener // copied on write; read under mu, called outside it
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
	if s.WindowType == WindowTime {
		b.win = newTimeWindow(s.Window, s.Buckets)
	} else {
		b.win = newCountWindow(s.WindowSize)
	}
	b.classify = b.defaultClassify
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

func (b *Breaker) defaultClassify(o endpoint.Outcome) Verdict {
	switch {
	case o.Canceled:
		return Ignore
	case o.Err != nil, b.cfg.statuses.has(o.Status):
		return Failure
	}
	return Success
}

// OnStateChange adds a listener called once per transition, after the
// breaker's lock is released (so it may call the breaker). Listeners of
// transitions that race each other may run concurrently.
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
	b     *Breaker
	gen   uint64
	probe bool
}

// transition is a state change to announce once the lock is released.
type transition struct {
	from, to  State
	reason    string
	at        time.Time
	listeners []Listener
}

func (t *transition) announce() {
	for _, l := range t.listeners {
		l(t.from, t.to, t.reason, t.at)
	}
}

// Allow admits one call at now, or returns ErrOpen. An admitted call's
// outcome must be reported with Ticket.Done.
func (b *Breaker) Allow(now time.Time) (Ticket, error) {
	// A call admitted on a state that changes right after the load is
	// harmless: Done drops outcomes of an old generation.
	if sg := b.stateGen.Load(); State(sg&3) == Closed {
		return Ticket{b: b, gen: sg >> 2}, nil
	}
	b.mu.Lock()
	switch b.state {
	case Closed:
		t := Ticket{b: b, gen: b.gen}
		b.mu.Unlock()
		return t, nil
	case Open:
		if now.Sub(b.openedAt) < b.openFor {
			b.mu.Unlock()
			return Ticket{}, ErrOpen
		}
		tr := b.halfOpenLocked(now)
		b.probes = 1
		t := Ticket{b: b, gen: b.gen, probe: true}
		b.mu.Unlock()
		tr.announce()
		return t, nil
	default: // HalfOpen
		if b.probes >= b.cfg.HalfOpenProbes {
			b.mu.Unlock()
			return Ticket{}, ErrOpen
		}
		b.probes++
		t := Ticket{b: b, gen: b.gen, probe: true}
		b.mu.Unlock()
		return t, nil
	}
}

// State returns the breaker's state at now: an open breaker whose open
// period has elapsed is half-open.
func (b *Breaker) State(now time.Time) State {
	b.mu.Lock()
	if b.state == Open && now.Sub(b.openedAt) >= b.openFor {
		tr := b.halfOpenLocked(now)
		b.mu.Unlock()
		tr.announce()
		return HalfOpen
	}
	s := b.state
	b.mu.Unlock()
	return s
}

// Done reports the outcome of the call t admitted, finished at now. The
// outcome of a call admitted before the breaker last changed state is
// dropped: it describes a past the breaker has already judged.
func (t Ticket) Done(o endpoint.Outcome, now time.Time) {
	b := t.b
	if b == nil {
		return
	}
	v := b.classify(o)
	slow := b.cfg.SlowThreshold > 0 && o.Latency >= b.cfg.SlowThreshold
	b.mu.Lock()
	if t.gen != b.gen {
		b.mu.Unlock()
		return
	}
	var tr transition
	if t.probe {
		tr = b.probeDoneLocked(v, slow, o.Latency, now)
	} else if v != Ignore {
		tr = b.recordLocked(v == Failure, slow, now)
	}
	b.mu.Unlock()
	if tr.listeners != nil {
		tr.announce()
	}
}

func (b *Breaker) recordLocked(failed, slow bool, now time.Time) transition {
	if failed {
		b.consecutive++
	} else {
		b.consecutive = 0
	}
	c := b.win.record(now, failed, slow)
	if n := b.cfg.ConsecutiveFailures; n > 0 && b.consecutive >= n {
		return b.openLocked(now, b.cfg.OpenFor, fmt.Sprintf("open: %d consecutive failures", b.consecutive))
	}
	if c.total < b.cfg.MinRequests {
		return transition{}
	}
	if r := float64(c.failures) / float64(c.total); r >= b.cfg.FailureRate {
		return b.openLocked(now, b.cfg.OpenFor, fmt.Sprintf("open: failure rate %d%% over %d calls", percent(r), c.total))
	}
	if b.cfg.SlowThreshold > 0 {
		if r := float64(c.slow) / float64(c.total); r >= b.cfg.SlowRate {
			return b.openLocked(now, b.cfg.OpenFor, fmt.Sprintf("open: slow-call rate %d%% over %d calls (at or over %v)", percent(r), c.total, b.cfg.SlowThreshold))
		}
	}
	return transition{}
}

func (b *Breaker) probeDoneLocked(v Verdict, slow bool, latency time.Duration, now time.Time) transition {
	switch {
	case v == Ignore:
		// The probe told nothing: free its slot for another.
		b.probes--
		return transition{}
	case v == Failure:
		d := min(b.openFor*2, b.cfg.MaxOpenFor)
		return b.openLocked(now, d, fmt.Sprintf("open: probe failed, open for %v", d))
	case slow:
		d := min(b.openFor*2, b.cfg.MaxOpenFor)
		return b.openLocked(now, d, fmt.Sprintf("open: probe slow (%v, at or over %v), open for %v", latency, b.cfg.SlowThreshold, d))
	}
	b.probesOK++
	if b.probesOK < b.cfg.HalfOpenProbes {
		return transition{}
	}
	b.win.reset()
	b.consecutive = 0
	b.openFor = b.cfg.OpenFor
	return b.setLocked(Closed, now, fmt.Sprintf("closed: %d %s succeeded", b.probesOK, plural(b.probesOK, "probe", "probes")))
}

func (b *Breaker) openLocked(now time.Time, d time.Duration, reason string) transition {
	b.openedAt = now
	b.openFor = d
	b.win.reset()
	b.consecutive = 0
	return b.setLocked(Open, now, reason)
}

func (b *Breaker) halfOpenLocked(now time.Time) transition {
	b.probes, b.probesOK = 0, 0
	return b.setLocked(HalfOpen, now, fmt.Sprintf("half-open: open for %v elapsed", b.openFor))
}

func (b *Breaker) setLocked(to State, now time.Time, reason string) transition {
	from := b.state
	b.state = to
	b.gen++
	b.stateGen.Store(b.gen<<2 | uint64(to))
	ls := b.listeners
	if ls == nil {
		ls = []Listener{} // non-nil marks that a transition happened
	}
	return transition{from: from, to: to, reason: reason, at: now, listeners: ls}
}

func percent(r float64) int { return int(math.Round(r * 100)) }

// Do runs fn if the breaker admits a call now, and reports its outcome: its
// error, and its latency for the slow-call rate. An error that is ctx's own
// cancellation (context.Canceled with ctx canceled) is ignored; a deadline
// counts as a failure like any timeout. A panic in fn counts as a failure
// and is re-raised. Do returns ErrOpen without calling fn when the breaker
// refuses the call, else fn's error.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) (err error) {
	start := time.Now()
	t, err := b.Allow(start)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished {
			end := time.Now()
			t.Done(endpoint.Outcome{Err: errPanic, Latency: end.Sub(start)}, end)
		}
	}()
	err = fn(ctx)
	finished = true
	end := time.Now()
	t.Done(endpoint.Outcome{
		Err:      err,
		Latency:  end.Sub(start),
		Canceled: err != nil && errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled,
	}, end)
	return err
}

var errPanic = errors.New("breaker: call panicked")

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
