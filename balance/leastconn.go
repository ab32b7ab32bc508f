package balance

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// LeastConnName is the name of the least-connections policy.
const LeastConnName = "least_conn"

func init() {
	Register(LeastConnName, func(cfg Config) (Balancer, error) {
		if err := cfg.check("slow_start"); err != nil {
			return nil, err
		}
		return NewLeastConn(cfg), nil
	})
}

const (
	// lcScanLimit is the largest pool least_conn scans whole; larger pools
	// are sampled. A scan with its random tie-break costs ~1.6ns per
	// endpoint here, so at 32 endpoints it costs what sampling does (~75ns
	// per Pick+Done, BenchmarkPick) and beyond that sampling is cheaper.
	lcScanLimit = 32
	// lcSample is the number of endpoints least_conn compares in a pool
	// larger than lcScanLimit: drawn at random by weight, the least loaded
	// of them wins ("power of d choices", d = 8), in constant time.
	lcSample = 8
)

// LeastConn hands each request to the ready endpoint with the fewest
// in-flight requests relative to its weight, ties broken at random in
// proportion to weight.
//
// Pools of up to 32 endpoints are scanned whole; in larger ones 8
// endpoints drawn at random by weight are compared, the least loaded of
// them wins, and equals go to the first drawn. That keeps Pick under 100ns
// from 33 to 10,000 endpoints. The choice is then the least loaded of 8
// random endpoints rather than of the whole pool: a pick lands on an
// endpoint busier than the median only when all 8 are (1 in 256,
// TestLeastConnSamplesLargePools).
type LeastConn struct {
	rng
	rb   *rebuilder
	snap atomic.Pointer[lcSnap]
}

// ties in scan are uint8 indices.
var _ [256 - lcScanLimit]struct{}

type lcSnap struct {
	eps   []*endpoint.Endpoint
	w     []int64 // effective weights, fixed point (fixedWeights)
	equal bool    // all w are equal
	s     sampler // for pools larger than lcScanLimit
}

// NewLeastConn returns an empty least-connections balancer. It reads
// cfg.SlowStart.
func NewLeastConn(cfg Config) *LeastConn {
	l := &LeastConn{}
	l.snap.Store(&lcSnap{})
	l.rb = newRebuilder(cfg.SlowStart, l.build)
	return l
}

// Update implements Balancer.
func (l *LeastConn) Update(set *endpoint.Set) { l.rb.update(set) }

func (l *LeastConn) build(set *endpoint.Set, factors []float64) {
	ew := effWeights(set.Ready, factors)
	s := &lcSnap{eps: set.Ready, w: fixedWeights(ew)}
	s.equal = len(ew) == 0 || allEqual(ew)
	if len(ew) > lcScanLimit {
		s.s = newSampler(ew)
	}
	l.snap.Store(s)
}

// Pick implements Balancer.
func (l *LeastConn) Pick(info *Info) (Result, error) {
	s := l.snap.Load()
	n := len(s.eps)
	if n == 0 {
		return Result{}, ErrNoEndpoint
	}
	if n > lcScanLimit {
		return pick(s.sampled(&l.rng, info)), nil
	}
	if hasTried(info) {
		if ep := s.scan(&l.rng, info.Tried); ep != nil {
			return pick(ep), nil
		}
	}
	return pick(s.scan(&l.rng, nil)), nil
}

// scan returns the least loaded endpoint not in tried, or nil if there is
// none. Ties are collected on the stack and one is drawn by weight.
func (s *lcSnap) scan(r *rng, tried []*endpoint.Endpoint) *endpoint.Endpoint {
	var ties [lcScanLimit]uint8
	nt := 0
	var tieW int64
	// Above any real count: in-flight counts stay below 2^32 and
	// fixed-point weights below 2^24, so no product overflows.
	bestIn, bestW := int64(1)<<32, int64(1)
	for i, ep := range s.eps {
		if tried != nil && Tried(tried, ep) {
			continue
		}
		// in/w against bestIn/bestW without division.
		in, w := ep.InFlight(), s.w[i]
		a, b := in*bestW, bestIn*w
		if a > b {
			continue
		}
		if a < b {
			bestIn, bestW, nt, tieW = in, w, 0, 0
		}
		ties[nt] = uint8(i)
		nt++
		tieW += w
	}
	switch {
	case nt == 0:
		return nil
	case nt == 1:
		return s.eps[ties[0]]
	case s.equal:
		return s.eps[ties[uniformN(r, nt)]]
	}
	x := int64(bounded(r.next(), uint64(tieW)))
	for _, i := range ties[:nt] {
		if x -= s.w[i]; x < 0 {
			return s.eps[i]
		}
	}
	return s.eps[ties[nt-1]]
}

// sampled compares lcSample endpoints drawn by weight; among equals the
// first drawn wins, which is itself a draw by weight.
func (s *lcSnap) sampled(r *rng, info *Info) *endpoint.Endpoint {
	var best *endpoint.Endpoint
	var bestIn, bestW int64
	m := more{r.next()}
	for k := 0; k < lcSample; k++ {
		i := s.s.draw(m.next())
		ep := s.eps[i]
		if hasTried(info) && Tried(info.Tried, ep) {
			continue
		}
		in, w := ep.InFlight(), s.w[i]
		if best == nil || in*bestW < bestIn*w {
			best, bestIn, bestW = ep, in, w
		}
	}
	if best == nil {
		return avoidTried(s.eps, s.s.draw(r.next()), info)
	}
	return best
}
