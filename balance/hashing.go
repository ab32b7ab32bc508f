package balance

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
)

// What consistent_hash and maglev share: the hash key, what happens to
// requests without one (the fallback policy, or ErrNoHashKey), and bounded
// loads.

// What a hashing policy does with a request that has no key
// (Config.MissingKey).
const (
	MissingKeyFallback = "fallback" // hand it to Config.Fallback (the default)
	MissingKeyError    = "error"    // refuse it: Pick returns ErrNoHashKey
)

// ErrNoHashKey is returned by the Pick of consistent_hash or maglev
// configured with missing_key: error, for a request without a hash key
// (Info.HasKey false). The HTTP proxy answers it with 400 hash_key_missing.
var ErrNoHashKey = errors.New("balance: the request has no hash key")

// hashCommon validates and applies the configuration both hashing policies
// read.
type hashCommon struct {
	key      HashKey
	fallback Balancer     // nil with missing_key: error
	bounded  float64      // BoundedLoad; 0: off
	total    atomic.Int64 // picks in flight through this balancer (bounded mode)
	sides    map[*endpoint.Endpoint]*hashSide
}

// hashSide counts one endpoint's picks in flight through this balancer and
// holds its prebuilt Done, in bounded mode.
type hashSide struct {
	ep    *endpoint.Endpoint
	in    atomic.Int64
	total *atomic.Int64
	done  func(endpoint.Outcome)
}

func (s *hashSide) release(o endpoint.Outcome) {
	s.in.Add(-1)
	s.total.Add(-1)
	s.ep.Release(o)
}

// hashFallbacks are the policies a hashing policy may fall back to.
var hashFallbacks = []string{RoundRobinName, WeightedRoundRobinName, RandomName, WeightedRandomName, LeastConnName, P2CName, P2CEWMAName}

// newHashCommon reports every problem of the keys it reads: hash_key,
// bounded_load, missing_key, fallback and slow_start.
func newHashCommon(cfg Config) (*hashCommon, error) {
	errs := []error{cfg.negative("slow_start")}
	var key HashKey
	if cfg.HashKey == "" {
		errs = append(errs, field.Errorf("hash_key", "required by %s (header:NAME, cookie:NAME, client_ip, path or query:NAME)", cfg.Policy))
	} else if k, err := ParseHashKey(cfg.HashKey); err != nil {
		errs = append(errs, err)
	} else {
		key = k
	}
	if b := cfg.BoundedLoad; b != 0 && (!(b > 1) || math.IsInf(b, 1)) {
		errs = append(errs, field.Errorf("bounded_load", "must be > 1 (1.25 is a good start), got %v", cfg.BoundedLoad))
	}
	fb := cfg.Fallback
	if fb == "" {
		fb = DefaultFallback
	}
	var fallback Balancer
	switch cfg.MissingKey {
	case "", MissingKeyFallback:
	case MissingKeyError:
		if cfg.Fallback != "" {
			errs = append(errs, field.Errorf("fallback", "not used with missing_key: error (a request without a key is refused)"))
		}
		fb = ""
	default:
		errs = append(errs, field.Errorf("missing_key", "%q is not one of %s, %s", cfg.MissingKey, MissingKeyFallback, MissingKeyError))
	}
	switch {
	case fb == "": // missing_key: error, no fallback policy
	case !slices.Contains(hashFallbacks, fb):
		errs = append(errs, field.Errorf("fallback", "%q is not one of %s", fb, policyList(hashFallbacks)))
	case cfg.SlowStart >= 0:
		fbCfg := Config{Policy: fb}
		if fb != RoundRobinName && fb != RandomName {
			fbCfg.SlowStart = cfg.SlowStart
		}
		var err error
		if fallback, err = New(fbCfg); err != nil {
			errs = append(errs, field.Errorf("fallback", "%s: %w", fb, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &hashCommon{key: key, fallback: fallback, bounded: cfg.BoundedLoad, sides: map[*endpoint.Endpoint]*hashSide{}}, nil
}

// setRand forwards the test seam to the fallback.
func (h *hashCommon) setRand(fn func() uint64) {
	if r, ok := h.fallback.(randSetter); ok {
		r.setRand(fn)
	}
}

// update feeds the fallback, if there is one.
func (h *hashCommon) update(set *endpoint.Set) {
	if h.fallback != nil {
		h.fallback.Update(set)
	}
}

// keyless answers a request without a key: the fallback's pick, or
// ErrNoHashKey.
func (h *hashCommon) keyless(info *Info) (Result, error) {
	if h.fallback == nil {
		return Result{}, ErrNoHashKey
	}
	return h.fallback.Pick(info)
}

// hashSnap is the part of a hashing policy's pick state that choose reads.
type hashSnap struct {
	eps   []*endpoint.Endpoint
	share []float64   // bounded mode: BoundedLoad * weight / total weight
	sides []*hashSide // bounded mode
}

// boundedState fills the bounded-load part of s for weights w; called with
// the owning rebuilder's lock held.
func (h *hashCommon) boundedState(s *hashSnap, all []*endpoint.Endpoint, w []float64) {
	if h.bounded == 0 {
		return
	}
	next := make(map[*endpoint.Endpoint]*hashSide, len(all))
	for _, ep := range all {
		if sd := h.sides[ep]; sd != nil {
			next[ep] = sd
		}
	}
	var sum float64
	for _, x := range w {
		sum += x
	}
	s.share = make([]float64, len(s.eps))
	s.sides = make([]*hashSide, len(s.eps))
	for i, ep := range s.eps {
		s.share[i] = h.bounded * w[i] / sum
		sd := next[ep]
		if sd == nil {
			sd = &hashSide{ep: ep, total: &h.total}
			sd.done = sd.release
			next[ep] = sd
		}
		s.sides[i] = sd
	}
	h.sides = next
}

// choose walks owners (ring points or table slots) from start and returns
// the first endpoint the request has not tried and, in bounded mode, whose
// in-flight count is below its capacity ceil(share * (in-flight total + 1)).
// If every endpoint is tried or full it returns the one at start.
func (h *hashCommon) choose(s *hashSnap, owners []uint32, start int, info *Info) Result {
	tried := hasTried(info)
	if h.bounded == 0 && !tried {
		return pick(s.eps[owners[start]])
	}
	n := len(owners)
	total := float64(h.total.Load() + 1)
	j := start
	for k := 0; k < n; k++ {
		i := owners[j]
		if !tried || !Tried(info.Tried, s.eps[i]) {
			if h.bounded == 0 {
				return pick(s.eps[i])
			}
			sd := s.sides[i]
			if float64(sd.in.Load()) < math.Ceil(s.share[i]*total) {
				return h.pickBounded(sd)
			}
		}
		if j++; j == n {
			j = 0
		}
	}
	i := owners[start]
	if h.bounded == 0 {
		return pick(s.eps[i])
	}
	return h.pickBounded(s.sides[i])
}

func (h *hashCommon) pickBounded(sd *hashSide) Result {
	sd.in.Add(1)
	h.total.Add(1)
	return pickWith(sd.ep, sd.done)
}
