package balance

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
)

// ConsistentHashName is the name of the consistent-hashing (ring) policy.
const ConsistentHashName = "consistent_hash"

func init() {
	Register(ConsistentHashName, func(cfg Config) (Balancer, error) {
		unused := cfg.unused("hash_key", "bounded_load", "fallback", "virtual_nodes", "slow_start")
		b, err := NewConsistentHash(cfg)
		if err := errors.Join(unused, err); err != nil {
			return nil, err
		}
		return b, nil
	})
}

// ConsistentHash sends every request with the same key to the same
// endpoint, by placing VirtualNodes points per unit of weight for each
// ready endpoint on a 64-bit hash ring and taking the first point clockwise
// from the key's hash.
//
// Adding or removing an endpoint moves only the keys of its own arcs. With
// BoundedLoad c, a key whose endpoint already has ceil(c * (in-flight + 1)
// * weight share) requests in flight through this balancer goes on to the
// next endpoint clockwise (Mirrokni, Thorup, Zadimoghaddam: "Consistent
// Hashing with Bounded Loads"). Requests without a key go to Fallback.
//
// The ring is capped at 2^20 points: larger pools get fewer points per
// endpoint (at least 1), which costs balance, not correctness. With
// SlowStart a ramping endpoint's point count grows with its weight;
// because its points are fixed by (address, index), keys only ever move
// onto it during the ramp.
type ConsistentHash struct {
	h    *hashCommon
	vn   int
	rb   *rebuilder
	snap atomic.Pointer[ringSnap]
}

// maxRingPoints caps the ring: 2^20 points are 12 MiB of pick state.
const maxRingPoints = 1 << 20

type ringSnap struct {
	hashSnap
	points []uint64 // sorted
	owners []uint32 // owners[i] owns points[i]: an index into eps
}

// NewConsistentHash returns an empty ring balancer, or why cfg is not
// valid for it.
func NewConsistentHash(cfg Config) (*ConsistentHash, error) {
	var vnErr error
	if cfg.VirtualNodes < 0 {
		vnErr = field.Errorf("virtual_nodes", "must be positive, got %d", cfg.VirtualNodes)
	}
	h, err := newHashCommon(cfg)
	if err := errors.Join(vnErr, err); err != nil {
		return nil, err
	}
	c := &ConsistentHash{h: h, vn: cfg.VirtualNodes}
	if c.vn == 0 {
		c.vn = DefaultVirtualNodes
	}
	c.snap.Store(&ringSnap{})
	c.rb = newRebuilder(cfg.SlowStart, c.build)
	return c, nil
}

// Update implements Balancer.
func (c *ConsistentHash) Update(set *endpoint.Set) {
	c.rb.update(set)
	c.h.fallback.Update(set)
}

func (c *ConsistentHash) setRand(fn func() uint64) { c.h.setRand(fn) }

// A ring point packs its position (the top 44 bits of its hash) and its
// owner (an index into the ready endpoints, the low 20 bits) into one
// uint64, so that sorting the ring is a radix sort of plain integers: ~20x
// faster than sorting structs, which matters at 10,000 endpoints (2^20
// points). Points at the same position go to the endpoint listed first.
const (
	ownerBits = 20
	ownerMask = 1<<ownerBits - 1
)

func (c *ConsistentHash) build(set *endpoint.Set, factors []float64) {
	eps := set.Ready
	w := effWeights(eps, factors)
	counts := make([]int, len(eps))
	total := 0
	for i, x := range w {
		counts[i] = max(1, int(math.Round(x*float64(c.vn))))
		total += counts[i]
	}
	if total > maxRingPoints {
		scale := float64(maxRingPoints) / float64(total)
		total = 0
		for i := range counts {
			counts[i] = max(1, int(float64(counts[i])*scale))
			total += counts[i]
		}
	}
	pts := make([]uint64, 0, total)
	for i, ep := range eps[:min(len(eps), ownerMask)] {
		ah := hashString(ep.Address())
		for j := range counts[i] {
			pts = append(pts, pointHash(ah, j)&^ownerMask|uint64(i))
		}
	}
	radixSort(pts)
	s := &ringSnap{hashSnap: hashSnap{eps: eps}, points: pts, owners: make([]uint32, len(pts))}
	for i, p := range pts {
		s.owners[i] = uint32(p & ownerMask)
	}
	c.h.boundedState(&s.hashSnap, set.All, w)
	c.snap.Store(s)
}

// Pick implements Balancer.
func (c *ConsistentHash) Pick(info *Info) (Result, error) {
	if info == nil || !info.HasKey {
		return c.h.fallback.Pick(info)
	}
	s := c.snap.Load()
	if len(s.points) == 0 {
		return Result{}, ErrNoEndpoint
	}
	return c.h.choose(&s.hashSnap, s.owners, s.find(hashString(info.Key)&^ownerMask), info), nil
}

// find returns the index of the first point at or after position h,
// wrapping.
func (s *ringSnap) find(h uint64) int {
	lo, hi := 0, len(s.points)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.points[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.points) {
		return 0
	}
	return lo
}

// radixSort sorts a in place: least significant byte first, skipping the
// bytes in which all elements agree.
func radixSort(a []uint64) {
	if len(a) < 256 {
		slices.Sort(a)
		return
	}
	src, dst := a, make([]uint64, len(a))
	for shift := uint(0); shift < 64; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[byte(x>>shift)]++
		}
		if count[byte(src[0]>>shift)] == len(src) {
			continue
		}
		pos := 0
		for i, c := range count {
			count[i] = pos
			pos += c
		}
		for _, x := range src {
			d := byte(x >> shift)
			dst[count[d]] = x
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &a[0] {
		copy(a, src)
	}
}
