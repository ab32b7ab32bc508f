package balance

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// P2CName is the name of the power-of-two-choices policy.
const P2CName = "p2c"

func init() {
	Register(P2CName, func(cfg Config) (Balancer, error) {
		if err := cfg.check("slow_start"); err != nil {
			return nil, err
		}
		return NewP2C(cfg), nil
	})
}

// P2C draws two ready endpoints at random by weight and hands the request
// to the one with fewer in-flight requests relative to its weight ("the
// power of two random choices").
//
// When the two are equally loaded the first drawn wins, so idle endpoints
// share traffic in proportion to weight.
type P2C struct {
	rng
	rb   *rebuilder
	snap atomic.Pointer[lcSnap]
}

// NewP2C returns an empty power-of-two-choices balancer. It reads
// cfg.SlowStart.
func NewP2C(cfg Config) *P2C {
	p := &P2C{}
	p.snap.Store(&lcSnap{})
	p.rb = newRebuilder(cfg.SlowStart, p.build)
	return p
}

// Update implements Balancer.
func (p *P2C) Update(set *endpoint.Set) { p.rb.update(set) }

func (p *P2C) build(set *endpoint.Set, factors []float64) {
	ew := effWeights(set.Ready, factors)
	p.snap.Store(&lcSnap{eps: set.Ready, w: fixedWeights(ew), s: newSampler(ew)})
}

// Pick implements Balancer.
func (p *P2C) Pick(info *Info) (Result, error) {
	s := p.snap.Load()
	n := len(s.eps)
	if n == 0 {
		return Result{}, ErrNoEndpoint
	}
	a, b := s.two(&p.rng, info)
	ea, eb := s.eps[a], s.eps[b]
	// ea unless eb carries less per unit of weight.
	if eb.InFlight()*s.w[a] < ea.InFlight()*s.w[b] {
		ea = eb
	}
	return pick(ea), nil
}

// two draws two distinct candidates by weight (when there are two): a
// second draw equal to the first is drawn again once, then replaced by a
// uniform draw among the others. The first draw stays exactly proportional
// to weight, and with it the share among equally loaded endpoints.
// Candidates the request already tried are redrawn a few times, then
// replaced by the next untried endpoint.
func (s *lcSnap) two(r *rng, info *Info) (int, int) {
	x := r.next()
	m := more{x}
	a := s.s.draw(x)
	b := s.s.draw(m.next())
	if b == a && s.s.n > 1 {
		if b = s.s.draw(m.next()); b == a {
			b = (a + 1 + int(bounded(m.next(), s.s.n-1))) % int(s.s.n)
		}
	}
	if hasTried(info) {
		a = s.untried(r, a, info)
		b = s.untried(r, b, info)
	}
	return a, b
}

// untried returns i, or another index the request has not tried.
func (s *lcSnap) untried(r *rng, i int, info *Info) int {
	for k := 0; k < 3 && Tried(info.Tried, s.eps[i]); k++ {
		i = s.s.draw(r.next())
	}
	return untried(s.eps, i, info)
}
