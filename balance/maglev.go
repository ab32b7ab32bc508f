package balance

import (
	"container/heap"
	"errors"
	"math"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
)

// MaglevName is the name of the Maglev consistent-hashing policy.
const MaglevName = "maglev"

func init() {
	Register(MaglevName, func(cfg Config) (Balancer, error) {
		var slow error
		if cfg.SlowStart != 0 {
			slow = field.Errorf("slow_start", "not supported by maglev: every weight change rebuilds the table and moves keys between unrelated endpoints (use consistent_hash)")
		}
		// slow_start is left out of unused, which would say it again.
		unused := cfg.unused("hash_key", "bounded_load", "missing_key", "fallback", "table_size", "slow_start")
		b, err := NewMaglev(cfg)
		if err := errors.Join(slow, unused, err); err != nil {
			return nil, err
		}
		return b, nil
	})
}

// maxTableSize bounds TableSize (16,777,213 is the largest prime below
// 2^24); a table costs 4 bytes per slot.
const maxTableSize = 1<<24 - 3

// Maglev sends every request with the same key to the same endpoint
// through a lookup table of TableSize slots that each ready endpoint fills
// in turn, in proportion to its weight, following its own permutation of
// the slots (Eisenbud et al., "Maglev", NSDI 2016; weights as in Envoy).
//
// Compared with consistent_hash, load is spread almost exactly by weight
// and a lookup is one table read, but a change of membership moves a few
// more keys than the leaving or joining endpoint's own. BoundedLoad,
// MissingKey and Fallback work as in consistent_hash, walking on to the
// next slots.
// Maglev does not do slow start.
type Maglev struct {
	h    *hashCommon
	m    int
	rb   *rebuilder
	snap atomic.Pointer[maglevSnap]
}

type maglevSnap struct {
	hashSnap
	table []uint32 // slot -> index into eps
}

// NewMaglev returns an empty Maglev balancer, or why cfg is not valid for
// it.
func NewMaglev(cfg Config) (*Maglev, error) {
	var tableErr error
	m := cfg.TableSize
	if m == 0 {
		m = DefaultTableSize
	}
	if m < 0 || m > maxTableSize {
		tableErr = field.Errorf("table_size", "must be between 2 and %d, got %d", maxTableSize, m)
	} else if !isPrime(m) {
		tableErr = field.Errorf("table_size", "%d is not prime (try %d)", m, nextPrime(m))
	}
	// Maglev has no slow start: its weights are fixed, and so is the
	// fallback's.
	cfg.SlowStart = 0
	h, err := newHashCommon(cfg)
	if err := errors.Join(tableErr, err); err != nil {
		return nil, err
	}
	b := &Maglev{h: h, m: m}
	b.snap.Store(&maglevSnap{})
	b.rb = newRebuilder(0, b.build)
	return b, nil
}

func nextPrime(n int) int {
	for !isPrime(n) {
		n++
	}
	return n
}

// Update implements Balancer.
func (b *Maglev) Update(set *endpoint.Set) {
	b.rb.update(set)
	b.h.update(set)
}

func (b *Maglev) setRand(fn func() uint64) { b.h.setRand(fn) }

func (b *Maglev) build(set *endpoint.Set, _ []float64) {
	eps := set.Ready
	w := effWeights(eps, nil)
	s := &maglevSnap{hashSnap: hashSnap{eps: eps}}
	if len(eps) > 0 {
		s.table = maglevTable(eps, w, b.m)
	}
	b.h.boundedState(&s.hashSnap, set.All, w)
	b.snap.Store(s)
}

// maglevTable fills m slots. Each endpoint has a permutation of the slots
// (offset and skip from its address hash) and, when its turn comes, takes
// the next slot of its permutation that is still free. Turns come in
// proportion to weight: the heaviest endpoint has one every round, one of
// a third of its weight every third round; within a round endpoints go in
// order.
func maglevTable(eps []*endpoint.Endpoint, w []float64, m int) []uint32 {
	const empty = math.MaxUint32
	table := make([]uint32, m)
	for i := range table {
		table[i] = empty
	}
	maxW := 0.0
	for _, x := range w {
		maxW = max(maxW, x)
	}
	ts := make(turns, len(eps))
	for i, ep := range eps {
		h := hashString(ep.Address())
		ts[i] = &turn{
			idx:    i,
			weight: w[i] / maxW,
			cur:    h % uint64(m),
			skip:   pointHash(h, 0)%uint64(m-1) + 1,
			round:  1,
		}
	}
	heap.Init(&ts)
	for filled := 0; filled < m; filled++ {
		t := ts[0]
		c := t.cur
		for table[c] != empty {
			if c += t.skip; c >= uint64(m) {
				c -= uint64(m)
			}
		}
		table[c] = uint32(t.idx)
		if t.cur = c + t.skip; t.cur >= uint64(m) {
			t.cur -= uint64(m)
		}
		t.target++
		// One turn per round at most; the next is the first later round r
		// with r*weight >= target.
		t.round = max(t.round+1, int64(math.Ceil(t.target/t.weight-1e-9)))
		heap.Fix(&ts, 0)
	}
	return table
}

type turn struct {
	idx       int
	weight    float64 // relative to the heaviest endpoint: (0, 1]
	cur, skip uint64
	target    float64 // slots taken
	round     int64   // the round of the next turn
}

// turns is a min-heap by (round, idx).
type turns []*turn

func (t turns) Len() int { return len(t) }
func (t turns) Less(i, j int) bool {
	if t[i].round != t[j].round {
		return t[i].round < t[j].round
	}
	return t[i].idx < t[j].idx
}
func (t turns) Swap(i, j int) { t[i], t[j] = t[j], t[i] }
func (t *turns) Push(x any)   { *t = append(*t, x.(*turn)) }
func (t *turns) Pop() any {
	old := *t
	x := old[len(old)-1]
	*t = old[:len(old)-1]
	return x
}

// Pick implements Balancer.
func (b *Maglev) Pick(info *Info) (Result, error) {
	if info == nil || !info.HasKey {
		return b.h.keyless(info)
	}
	s := b.snap.Load()
	if len(s.table) == 0 {
		return Result{}, ErrNoEndpoint
	}
	slot := int(bounded(hashString(info.Key), uint64(len(s.table))))
	return b.h.choose(&s.hashSnap, s.table, slot, info), nil
}
