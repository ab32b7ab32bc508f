package balance

import (
	"math"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// P2CEWMAName is the name of the power-of-two-choices policy on peak-EWMA
// latency.
const P2CEWMAName = "p2c_ewma"

func init() {
	Register(P2CEWMAName, func(cfg Config) (Balancer, error) {
		if err := cfg.check("slow_start", "decay_window", "error_penalty"); err != nil {
			return nil, err
		}
		return NewP2CEWMA(cfg), nil
	})
}

// P2CEWMA draws two ready endpoints at random by weight and hands the
// request to the one with the lower peak-EWMA latency times (in-flight + 1),
// as Finagle's and Linkerd's balancers do.
//
// The latency estimate of each endpoint jumps up to any latency above it
// (peak) and otherwise decays towards new observations with time constant
// DecayWindow; when read it also decays towards 0 for the time since its
// last observation, so that an endpoint that was slow once is retried
// eventually. A failed request (transport error or 5xx) counts as at least
// ErrorPenalty; a request the client canceled counts as nothing. An
// endpoint never observed costs 0 while idle (so it gets tried) and
// ErrorPenalty per in-flight request otherwise (so it is not flooded before
// its first answer). Costs within 1% of each other are equal and the first
// drawn wins, so idle endpoints share traffic in proportion to weight.
//
// The estimates live in a side struct per endpoint, carried across Updates
// for the same *endpoint.Endpoint, and are updated lock-free from Done.
type P2CEWMA struct {
	rng
	p     *ewmaParams
	rb    *rebuilder
	snap  atomic.Pointer[ewmaSnap]
	sides map[*endpoint.Endpoint]*ewmaSide // guarded by rb.mu
}

type ewmaParams struct {
	tau     float64     // DecayWindow in ns
	rate    float64     // 1/tau: a multiply on the request path, not a divide
	penalty float64     // ErrorPenalty in ns
	clock   clock.Clock // clock.Real; tests set it and rb.clock together (useClock)
}

type ewmaSnap struct {
	lcSnap
	sides []*ewmaSide
}

// ewmaSide is one endpoint's latency estimate and its prebuilt Done.
type ewmaSide struct {
	ep    *endpoint.Endpoint
	p     *ewmaParams
	cost  atomic.Uint64 // float64 bits: peak-EWMA latency in ns
	stamp atomic.Int64  // clock at the last observation; 0: never observed
	done  func(endpoint.Outcome)
}

// NewP2CEWMA returns an empty p2c_ewma balancer. It reads cfg.SlowStart,
// cfg.DecayWindow and cfg.ErrorPenalty.
func NewP2CEWMA(cfg Config) *P2CEWMA {
	b := &P2CEWMA{
		p: &ewmaParams{
			tau:     float64(orDuration(cfg.DecayWindow, DefaultDecayWindow)),
			rate:    1 / float64(orDuration(cfg.DecayWindow, DefaultDecayWindow)),
			penalty: float64(orDuration(cfg.ErrorPenalty, DefaultErrorPenalty)),
			clock:   clock.Real,
		},
		sides: map[*endpoint.Endpoint]*ewmaSide{},
	}
	b.snap.Store(&ewmaSnap{})
	b.rb = newRebuilder(cfg.SlowStart, b.build)
	return b
}

// Update implements Balancer.
func (b *P2CEWMA) Update(set *endpoint.Set) { b.rb.update(set) }

func (b *P2CEWMA) build(set *endpoint.Set, factors []float64) {
	next := make(map[*endpoint.Endpoint]*ewmaSide, len(set.All))
	// Keep the estimates of every endpoint in the pool, ready or not, so
	// that one that comes back is judged by what it last showed.
	for _, ep := range set.All {
		s := b.sides[ep]
		if s == nil {
			s = &ewmaSide{ep: ep, p: b.p}
			s.done = s.release
		}
		next[ep] = s
	}
	b.sides = next
	sides := make([]*ewmaSide, len(set.Ready))
	for i, ep := range set.Ready {
		sides[i] = next[ep]
		if sides[i] == nil { // a Set whose Ready is not a subset of All
			sides[i] = &ewmaSide{ep: ep, p: b.p}
			sides[i].done = sides[i].release
			next[ep] = sides[i]
		}
	}
	ew := effWeights(set.Ready, factors)
	b.snap.Store(&ewmaSnap{lcSnap: lcSnap{eps: set.Ready, s: newSampler(ew)}, sides: sides})
}

// Pick implements Balancer.
func (b *P2CEWMA) Pick(info *Info) (Result, error) {
	s := b.snap.Load()
	if len(s.eps) == 0 {
		return Result{}, ErrNoEndpoint
	}
	a, c := s.two(&b.rng, info)
	sa, sc := s.sides[a], s.sides[c]
	if sc.below(sa) {
		sa = sc
	}
	return pickWith(sa.ep, sa.done), nil
}

// below reports whether s's load is more than 1% below o's (costs within
// 1% of each other are equal).
//
// Two estimates decay towards 0 with the same time constant, so their
// ratio as of any time after both stamps is the same: the one observed
// earlier is decayed to the later one's stamp, and Pick need not read the
// clock. Only an endpoint never observed that has requests in flight
// (ErrorPenalty each, which does not decay) is compared as of the clock's
// now.
func (s *ewmaSide) below(o *ewmaSide) bool {
	ts, to := s.stamp.Load(), o.stamp.Load()
	if ts == 0 || to == 0 {
		var now int64
		if (ts == 0 && s.ep.InFlight() > 0) || (to == 0 && o.ep.InFlight() > 0) {
			now = monoNow(s.p.clock)
		}
		return s.load(now)*1.01 < o.load(now)
	}
	ls := math.Float64frombits(s.cost.Load()) * float64(s.ep.InFlight()+1)
	lo := math.Float64frombits(o.cost.Load()) * float64(o.ep.InFlight()+1)
	switch {
	case ts < to:
		ls *= expNeg(float64(to-ts) * s.p.rate)
	case to < ts:
		lo *= expNeg(float64(ts-to) * s.p.rate)
	}
	return ls*1.01 < lo
}

// load is the endpoint's cost as of now: the estimate decayed for the time
// since it was last updated, times (in-flight + 1).
func (s *ewmaSide) load(now int64) float64 {
	in := float64(s.ep.InFlight())
	last := s.stamp.Load()
	if last == 0 {
		return s.p.penalty * in
	}
	c := math.Float64frombits(s.cost.Load())
	if el := now - last; el > 0 {
		c *= expNeg(float64(el) * s.p.rate)
	}
	return c * (in + 1)
}

// release is the endpoint's Done: observe as of o.At (the clock when it
// is unset), then release the endpoint.
func (s *ewmaSide) release(o endpoint.Outcome) {
	if o.At == 0 {
		o.At = monoNow(s.p.clock)
	}
	s.observe(o.At, &o)
	s.ep.Release(o)
}

// observe folds one outcome at now into the estimate; a failed request
// counts as at least ErrorPenalty. Concurrent observers may both decay
// over the same interval; that only shifts a little weight to the newer
// sample. It takes o by pointer: copying an Outcome into a call that does
// not inline costs more than the rest of a Done here.
func (s *ewmaSide) observe(now int64, o *endpoint.Outcome) {
	if o.Canceled {
		return
	}
	rtt := max(float64(o.Latency), 0)
	if failed(o) {
		rtt = max(rtt, s.p.penalty)
	}
	for {
		last := s.stamp.Load()
		oldBits := s.cost.Load()
		old := math.Float64frombits(oldBits)
		next := rtt
		if last != 0 && rtt < old {
			w := expNeg(float64(max(now-last, 0)) * s.p.rate)
			next = old*w + rtt*(1-w)
		}
		if s.cost.CompareAndSwap(oldBits, math.Float64bits(next)) {
			break
		}
	}
	// A racing observer may store an older now; the next one fixes it.
	if s.stamp.Load() < now {
		s.stamp.Store(now)
	}
}

// failed reports whether an outcome counts as an error for latency-aware
// policies: a transport error, or a 5xx answer (a fast-failing endpoint
// must not look fast).
func failed(o *endpoint.Outcome) bool { return !o.Canceled && (o.Err != nil || o.Status >= 500) }
