package upstream

import "github.com/switchboard-dev/switchboard/endpoint"

// Eligible returns the endpoints the balancer picks from now: the ready
// ones, or in panic mode every endpoint. inPanic reports panic mode. For
// explaining a pick (GET /api/v1/explain); the slice must not be modified.
func (u *Upstream) Eligible() (eps []*endpoint.Endpoint, inPanic bool) {
	g := u.cur.Load()
	eps = g.guard.picking()
	set := u.pool.Snapshot()
	return eps, len(set.Ready) < len(set.All) && len(eps) == len(set.All)
}
