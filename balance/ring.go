package balance

import (
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
)

// ConsistentHashName is the name of the consistent-hashing (ring) policy.
const ConsistentHashName = "consistent_hash"

// The hash functions of consistent_hash (Config.Hash).
const (
	HashFNV1a = "fnv1a" // FNV-1a 64 + MurmurHash3 finalizer, by address (the default)
	HashMD5   = "md5"   // 128-bit MD5 of "{id}_vn{i}", as the Python ring
)

func init() {
	Register(ConsistentHashName, func(cfg Config) (Balancer, error) {
		unused := cfg.unused("hash_key", "bounded_load", "missing_key", "fallback", "virtual_nodes", "hash", "slow_start")
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
//
// With Hash "md5" the ring is the one of the Python services our users
// run: an endpoint's points are at the MD5 of "{id}_vn{i}" for i from 0 to
// VirtualNodes x weight - 1 (id is Endpoint.ID, the registry's instance ID
// or a static target's id or address), read as 128-bit big-endian
// integers, and a key goes to the first point at or after the MD5 of its
// bytes, wrapping. Two points at the same position go to the endpoint
// listed later, as assigning them in turn to a Python dict would.
type ConsistentHash struct {
	h    *hashCommon
	vn   int
	md5  bool
	rb   *rebuilder
	snap atomic.Pointer[ringSnap]
}

// maxRingPoints caps the ring: 2^20 points are 12 MiB of pick state.
const maxRingPoints = 1 << 20

type ringSnap struct {
	hashSnap
	points []uint64 // sorted (fnv1a); the high 64 bits of each point (md5)
	lo     []uint64 // md5: the low 64 bits of each point
	owners []uint32 // owners[i] owns points[i]: an index into eps
}

// NewConsistentHash returns an empty ring balancer, or why cfg is not
// valid for it.
func NewConsistentHash(cfg Config) (*ConsistentHash, error) {
	var vnErr, hashErr error
	if cfg.VirtualNodes < 0 {
		vnErr = field.Errorf("virtual_nodes", "must be positive, got %d", cfg.VirtualNodes)
	}
	switch cfg.Hash {
	case "", HashFNV1a, HashMD5:
	default:
		hashErr = field.Errorf("hash", "%q is not one of %s, %s", cfg.Hash, HashFNV1a, HashMD5)
	}
	h, err := newHashCommon(cfg)
	if err := errors.Join(vnErr, hashErr, err); err != nil {
		return nil, err
	}
	c := &ConsistentHash{h: h, vn: cfg.VirtualNodes, md5: cfg.Hash == HashMD5}
	if c.vn == 0 {
		c.vn = DefaultVirtualNodes
		if c.md5 {
			c.vn = DefaultMD5VirtualNodes
		}
	}
	c.snap.Store(&ringSnap{})
	c.rb = newRebuilder(cfg.SlowStart, c.build)
	return c, nil
}

// Update implements Balancer.
func (c *ConsistentHash) Update(set *endpoint.Set) {
	c.rb.update(set)
	c.h.update(set)
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
	if c.md5 {
		c.buildMD5(set, eps, counts, w)
		return
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

// buildMD5 builds the md5 ring: counts[i] points "{id}_vn{j}" for each
// endpoint i.
func (c *ConsistentHash) buildMD5(set *endpoint.Set, eps []*endpoint.Endpoint, counts []int, w []float64) {
	type point struct {
		hi, lo uint64
		owner  uint32
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	pts := make([]point, 0, total)
	var buf []byte
	for i, ep := range eps {
		buf = append(buf[:0], ep.ID()...)
		buf = append(buf, "_vn"...)
		n := len(buf)
		for j := range counts[i] {
			buf = strconv.AppendInt(buf[:n], int64(j), 10)
			hi, lo := md5Point(buf)
			pts = append(pts, point{hi, lo, uint32(i)})
		}
	}
	// Sorted by position, equal positions by owner: the last of a run of
	// equal positions is the endpoint listed last, which the Python dict
	// would have kept (ring[h] = node, node after node).
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		return cmp.Compare(a.owner, b.owner)
	})
	s := &ringSnap{hashSnap: hashSnap{eps: eps}}
	s.points = make([]uint64, 0, len(pts))
	s.lo = make([]uint64, 0, len(pts))
	s.owners = make([]uint32, 0, len(pts))
	for k, p := range pts {
		if k+1 < len(pts) && pts[k+1].hi == p.hi && pts[k+1].lo == p.lo {
			continue
		}
		s.points = append(s.points, p.hi)
		s.lo = append(s.lo, p.lo)
		s.owners = append(s.owners, p.owner)
	}
	c.h.boundedState(&s.hashSnap, set.All, w)
	c.snap.Store(s)
}

// md5Point is the MD5 of b as a 128-bit big-endian integer: what Python's
// int(hashlib.md5(b).hexdigest(), 16) is.
func md5Point(b []byte) (hi, lo uint64) {
	d := md5.Sum(b)
	return binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:])
}

// md5Key is md5Point of a request key, without copying it: md5.Sum only
// reads its input, so the string's bytes are handed over as they are.
func md5Key(s string) (hi, lo uint64) {
	return md5Point(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// Pick implements Balancer.
func (c *ConsistentHash) Pick(info *Info) (Result, error) {
	if info == nil || !info.HasKey {
		return c.h.keyless(info)
	}
	s := c.snap.Load()
	if len(s.points) == 0 {
		return Result{}, ErrNoEndpoint
	}
	if c.md5 {
		hi, lo := md5Key(info.Key)
		return c.h.choose(&s.hashSnap, s.owners, s.find128(hi, lo), info), nil
	}
	return c.h.choose(&s.hashSnap, s.owners, s.find(hashString(info.Key)&^ownerMask), info), nil
}

// find128 returns the index of the first md5 point at or after position
// (hi, lo), wrapping: Python's bisect_left on the sorted ring keys.
func (s *ringSnap) find128(hi, lo uint64) int {
	i, j := 0, len(s.points)
	for i < j {
		m := int(uint(i+j) >> 1)
		if s.points[m] < hi || (s.points[m] == hi && s.lo[m] < lo) {
			i = m + 1
		} else {
			j = m
		}
	}
	if i == len(s.points) {
		return 0
	}
	return i
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
