package balance

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// RoundRobinName is the name of the round-robin policy.
const RoundRobinName = "round_robin"

func init() {
	Register(RoundRobinName, func(cfg Config) (Balancer, error) {
		if err := cfg.check(); err != nil {
			return nil, err
		}
		return NewRoundRobin(), nil
	})
}

// RoundRobin hands requests to the ready endpoints in turn, ignoring weight.
type RoundRobin struct {
	ready atomic.Pointer[[]*endpoint.Endpoint]
	next  atomic.Uint64
}

// NewRoundRobin returns an empty round-robin balancer.
func NewRoundRobin() *RoundRobin {
	rr := &RoundRobin{}
	rr.ready.Store(&[]*endpoint.Endpoint{})
	return rr
}

// Update implements Balancer.
func (rr *RoundRobin) Update(set *endpoint.Set) {
	ready := set.Ready
	rr.ready.Store(&ready)
}

// Pick implements Balancer.
func (rr *RoundRobin) Pick(info *Info) (Result, error) {
	eps := *rr.ready.Load()
	n := uint64(len(eps))
	if n == 0 {
		return Result{}, ErrNoEndpoint
	}
	i := rr.next.Add(1) - 1
	ep := eps[i%n]
	if info != nil && len(info.Tried) > 0 {
		for k := uint64(1); k < n && Tried(info.Tried, ep); k++ {
			ep = eps[(i+k)%n]
		}
	}
	return pick(ep), nil
}
