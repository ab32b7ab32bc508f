package balance

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// RandomName is the name of the uniform random policy.
const RandomName = "random"

func init() {
	Register(RandomName, func(cfg Config) (Balancer, error) {
		if err := cfg.check(); err != nil {
			return nil, err
		}
		return NewRandom(), nil
	})
}

// Random hands each request to a ready endpoint chosen uniformly at random,
// ignoring weight.
type Random struct {
	rng
	ready atomic.Pointer[[]*endpoint.Endpoint]
}

// NewRandom returns an empty random balancer.
func NewRandom() *Random {
	r := &Random{}
	r.ready.Store(&[]*endpoint.Endpoint{})
	return r
}

// Update implements Balancer.
func (r *Random) Update(set *endpoint.Set) {
	ready := set.Ready
	r.ready.Store(&ready)
}

// Pick implements Balancer.
func (r *Random) Pick(info *Info) (Result, error) {
	eps := *r.ready.Load()
	if len(eps) == 0 {
		return Result{}, ErrNoEndpoint
	}
	i := uniformN(&r.rng, len(eps))
	return pick(avoidTried(eps, i, info)), nil
}
