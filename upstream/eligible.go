package upstream

import (
	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// Eligible returns the endpoints the balancer picks from now: the ready
// ones, or in panic mode every endpoint. inPanic reports panic mode. For
// explaining a pick (GET /api/v1/explain); the slice must not be modified.
func (u *Upstream) Eligible() (eps []*endpoint.Endpoint, inPanic bool) {
	g := u.cur.Load()
	eps = g.guard.picking()
	set := u.pool.Snapshot()
	return eps, len(set.Ready) < len(set.All) && len(eps) == len(set.All)
}

// HashOwner returns the endpoint a hashing policy (consistent_hash,
// maglev) keeps key on, as balance.Owner says; ok is false for other
// policies or when there is none. With bounded_load the request may still
// go on to the next endpoint when that one is full.
func (u *Upstream) HashOwner(key string) (ep *endpoint.Endpoint, ok bool) {
	if o, isOwner := u.cur.Load().bal.(balance.Owner); isOwner {
		return o.Owner(key)
	}
	return nil, false
}
