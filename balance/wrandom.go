package balance

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// WeightedRandomName is the name of the weighted random policy.
const WeightedRandomName = "weighted_random"

func init() {
	Register(WeightedRandomName, func(cfg Config) (Balancer, error) {
		if err := cfg.check("slow_start"); err != nil {
			return nil, err
		}
		return NewWeightedRandom(cfg), nil
	})
}

// WeightedRandom hands each request to a ready endpoint chosen at random
// with probability proportional to its weight, in constant time.
//
// Update builds an alias table (see sampler); with SlowStart it is rebuilt
// every ramp step.
type WeightedRandom struct {
	rng
	rb   *rebuilder
	snap atomic.Pointer[weightedSnap]
}

// weightedSnap is the pick state of the policies that sample by weight.
type weightedSnap struct {
	eps []*endpoint.Endpoint
	s   sampler
}

// NewWeightedRandom returns an empty weighted random balancer. It reads
// cfg.SlowStart.
func NewWeightedRandom(cfg Config) *WeightedRandom {
	w := &WeightedRandom{}
	w.snap.Store(&weightedSnap{})
	w.rb = newRebuilder(cfg.SlowStart, w.build)
	return w
}

// Update implements Balancer.
func (w *WeightedRandom) Update(set *endpoint.Set) { w.rb.update(set) }

func (w *WeightedRandom) build(set *endpoint.Set, factors []float64) {
	w.snap.Store(&weightedSnap{eps: set.Ready, s: newSampler(effWeights(set.Ready, factors))})
}

// Pick implements Balancer.
func (w *WeightedRandom) Pick(info *Info) (Result, error) {
	return w.snap.Load().pick(&w.rng, info)
}

// pick draws by weight; see index.
func (s *weightedSnap) pick(r *rng, info *Info) (Result, error) {
	if len(s.eps) == 0 {
		return Result{}, ErrNoEndpoint
	}
	return pick(s.eps[s.index(r, info)]), nil
}

// index draws by weight; a draw the request already tried is redrawn a few
// times, then the next untried endpoint is taken. s.eps must not be empty.
func (s *weightedSnap) index(r *rng, info *Info) int {
	i := s.s.draw(r.next())
	if hasTried(info) {
		for k := 0; k < 3 && Tried(info.Tried, s.eps[i]); k++ {
			i = s.s.draw(r.next())
		}
		i = untried(s.eps, i, info)
	}
	return i
}
