package balance

import (
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// expNeg returns e^-x for x >= 0. Most decays on the request path cover
// microseconds of a 10s window; for x < 1e-3 the series 1 - x + x²/2 is
// exact to 2e-10 and ~6x cheaper than math.Exp. (A reduced-range
// polynomial for larger x measured no faster than math.Exp's assembly.)
func expNeg(x float64) float64 {
	if x < 1e-3 {
		return 1 - x + x*x/2
	}
	return math.Exp(-x)
}

// monoNow is the thin wrapper around c for the hot-path functions that take
// time as a parameter: clock.Nanos of c's now, plus 1 so that it is never 0
// (0 means "never" in EWMA stamps). For clock.Real it reads only the
// monotonic clock, which is cheaper than time.Now.
// endpoint.Nanotime is monoNow(clock.Real): callers' readings
// (Info.Now, Outcome.At) and the policies' own share one scale.
func monoNow(c clock.Clock) int64 { return clock.NowNanos(c) + 1 }

// rng is a policy's source of randomness: the runtime's per-thread
// generator behind math/rand/v2 (no lock, safe for concurrent use), unless a
// test installed a seeded one through setRand.
type rng struct{ fn func() uint64 }

func (r *rng) next() uint64 {
	if r.fn != nil {
		return r.fn()
	}
	return rand.Uint64()
}

// setRand installs fn as the source of randomness; nil restores the
// runtime's. It is a test seam: call it before any concurrent use.
func (r *rng) setRand(fn func() uint64) { r.fn = fn }

// randSetter is implemented by every policy that draws random numbers, so
// that tests can make them deterministic.
type randSetter interface{ setRand(fn func() uint64) }

// more derives further random numbers from one draw of the runtime's
// generator (which costs ~6ns here; a derivation ~1ns): SplitMix64 seeded
// with the draw. Policies that need several numbers per pick use it.
type more struct{ s uint64 }

func (m *more) next() uint64 {
	m.s += 0x9e3779b97f4a7c15
	return mix64(m.s)
}

// bounded maps a uniform 64-bit r to [0, n) without division (Lemire).
func bounded(r, n uint64) uint64 {
	hi, _ := bits.Mul64(r, n)
	return hi
}

// uniformN draws from [0, n) with r.
func uniformN(r *rng, n int) int { return int(bounded(r.next(), uint64(n))) }

// avoidTried returns ready[untried(ready, i, info)].
func avoidTried(ready []*endpoint.Endpoint, i int, info *Info) *endpoint.Endpoint {
	return ready[untried(ready, i, info)]
}

// untried returns i unless the request already tried ready[i]; then the
// index of the next ready endpoint after i that it has not tried, or i when
// it tried them all.
func untried(ready []*endpoint.Endpoint, i int, info *Info) int {
	if info == nil || len(info.Tried) == 0 || !Tried(info.Tried, ready[i]) {
		return i
	}
	n := len(ready)
	for k := 1; k < n; k++ {
		if j := (i + k) % n; !Tried(info.Tried, ready[j]) {
			return j
		}
	}
	return i
}

// hasTried reports whether info lists any tried endpoint.
func hasTried(info *Info) bool { return info != nil && len(info.Tried) > 0 }
