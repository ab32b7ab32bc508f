package upstream

import (
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// panicGuard passes the pool's snapshots to a balancer. When the share of
// ready endpoints falls below threshold, the balancer gets every endpoint
// as ready, so that the survivors are not crushed by the whole load
// (Envoy's panic threshold). Entering and leaving panic is logged.
type panicGuard struct {
	u         *Upstream
	threshold float64
	next      func(*endpoint.Set) // the balancer's Update
	inPanic   bool                // only touched under the pool's lock (subscriber calls)
	// last is what the balancer picks from now.
	last atomic.Pointer[[]*endpoint.Endpoint]
}

func (p *panicGuard) update(s *endpoint.Set) {
	if p.threshold > 0 && len(s.All) > 0 {
		share := float64(len(s.Ready)) / float64(len(s.All))
		panicNow := share < p.threshold
		if panicNow != p.inPanic {
			p.inPanic = panicNow
			if panicNow {
				p.u.log.Warn("upstream in panic: routing to every endpoint", "upstream", p.u.name, "ready", len(s.Ready), "total", len(s.All), "panic_threshold", p.threshold)
			} else {
				p.u.log.Info("upstream left panic", "upstream", p.u.name, "ready", len(s.Ready), "total", len(s.All))
			}
		}
		if panicNow {
			s = &endpoint.Set{Version: s.Version, All: s.All, Ready: s.All}
		}
	}
	p.u.metrics.setPanic(p.u.name, p.inPanic)
	p.last.Store(&s.Ready)
	p.next(s)
}

// picking returns the endpoints the balancer picks from now.
func (p *panicGuard) picking() []*endpoint.Endpoint {
	if l := p.last.Load(); l != nil {
		return *l
	}
	return nil
}
