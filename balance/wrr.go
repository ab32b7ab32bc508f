package balance

import (
	"math"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// WeightedRoundRobinName is the name of the smooth weighted round-robin
// policy.
const WeightedRoundRobinName = "weighted_round_robin"

func init() {
	Register(WeightedRoundRobinName, func(cfg Config) (Balancer, error) {
		if err := cfg.check("slow_start"); err != nil {
			return nil, err
		}
		return NewWeightedRoundRobin(cfg), nil
	})
}

// maxCycle bounds the length of a weighted round-robin cycle (the sum of
// the weights after dividing by their gcd). Longer cycles are scaled down
// to it, each weight to at least 1, which keeps ratios to within about
// n/maxCycle.
const maxCycle = 1 << 16

// WeightedRoundRobin hands requests to the ready endpoints in nginx's smooth
// weighted round-robin order (weights 5, 1, 1 give a a b a c a a).
//
// Update precomputes one whole cycle of that order; Pick indexes it with an
// atomic counter, so it takes no lock. The cycle is the sum of the weights
// after dividing them by their gcd, scaled down to at most 65,536 picks
// (see maxCycle). With SlowStart, ramping weights are in hundredths of the
// configured weight, and the cycle is rebuilt every ramp step.
type WeightedRoundRobin struct {
	rb   *rebuilder
	seq  atomic.Pointer[[]*endpoint.Endpoint]
	next atomic.Uint64
}

// NewWeightedRoundRobin returns an empty smooth weighted round-robin
// balancer. It reads cfg.SlowStart.
func NewWeightedRoundRobin(cfg Config) *WeightedRoundRobin {
	w := &WeightedRoundRobin{}
	w.seq.Store(&[]*endpoint.Endpoint{})
	w.rb = newRebuilder(cfg.SlowStart, w.build)
	return w
}

// Update implements Balancer.
func (w *WeightedRoundRobin) Update(set *endpoint.Set) { w.rb.update(set) }

func (w *WeightedRoundRobin) build(set *endpoint.Set, factors []float64) {
	seq := smoothSequence(set.Ready, cycleWeights(set.Ready, factors))
	w.seq.Store(&seq)
}

// Pick implements Balancer.
func (w *WeightedRoundRobin) Pick(info *Info) (Result, error) {
	seq := *w.seq.Load()
	n := uint64(len(seq))
	if n == 0 {
		return Result{}, ErrNoEndpoint
	}
	i := w.next.Add(1) - 1
	ep := seq[i%n]
	if hasTried(info) {
		for k := uint64(1); k < n && Tried(info.Tried, ep); k++ {
			ep = seq[(i+k)%n]
		}
	}
	return pick(ep), nil
}

// cycleWeights returns the integer weights of one cycle: configured weights
// (in hundredths times the ramp factor while ramping), divided by their gcd
// and scaled down to maxCycle.
func cycleWeights(eps []*endpoint.Endpoint, factors []float64) []int64 {
	w := make([]int64, len(eps))
	for i, ep := range eps {
		w[i] = int64(ep.Weight())
		if factors != nil {
			w[i] = max(1, int64(math.Round(float64(w[i])*100*factors[i])))
		}
	}
	reduce(w)
	var sum int64
	for _, x := range w {
		sum += x
	}
	if sum > maxCycle {
		for i, x := range w {
			w[i] = max(1, int64(math.Round(float64(x)*maxCycle/float64(sum))))
		}
		reduce(w)
	}
	return w
}

// reduce divides w by the gcd of its elements.
func reduce(w []int64) {
	var g int64
	for _, x := range w {
		a, b := g, x
		for b != 0 {
			a, b = b, a%b
		}
		g = a
	}
	if g > 1 {
		for i := range w {
			w[i] /= g
		}
	}
}

// smoothSequence returns one cycle of nginx's smooth weighted round robin
// over eps with weights w: every step each endpoint's current value grows
// by its weight, the largest (the first of equals) is chosen and its value
// drops by the total.
//
// Endpoints of equal weight are chosen in turn (their values differ only by
// how often each was chosen), so the cycle is computed per group of equal
// weights: O(cycle x distinct weights) instead of O(cycle x endpoints),
// which keeps 10,000 endpoints cheap.
func smoothSequence(eps []*endpoint.Endpoint, w []int64) []*endpoint.Endpoint {
	type group struct {
		weight  int64
		members []int // positions in eps, ascending
		chosen  int64 // times the group was chosen
	}
	var groups []*group
	byWeight := map[int64]*group{}
	var total int64
	for i, x := range w {
		g := byWeight[x]
		if g == nil {
			g = &group{weight: x}
			byWeight[x] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, i)
		total += x
	}
	seq := make([]*endpoint.Endpoint, 0, total)
	for t := int64(1); t <= total; t++ {
		var best *group
		var bestCur int64
		bestPos := 0
		for _, g := range groups {
			m := int64(len(g.members))
			// The group's next member has been chosen chosen/m times.
			cur := t*g.weight - total*(g.chosen/m)
			pos := g.members[g.chosen%m]
			if best == nil || cur > bestCur || (cur == bestCur && pos < bestPos) {
				best, bestCur, bestPos = g, cur, pos
			}
		}
		best.chosen++
		seq = append(seq, eps[bestPos])
	}
	return seq
}
