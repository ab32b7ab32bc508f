package httpproxy

import (
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/registry"
)

// Discovery gives upstreams their endpoints from registries. The
// application implements it over the discovery package's cached views; the
// proxy only sees whole instance sets.
type Discovery interface {
	// Watch starts (or shares) a feed of the query's instances from the
	// named registry ("embedded" or an entry of registries).
	Watch(registryName string, q registry.Query) (Feed, error)
}

// Feed is a stream of whole instance sets for one query.
type Feed interface {
	// Answered reports whether there has been a first answer (from the
	// registry or a disk cache).
	Answered() bool
	// Subscribe calls fn with the latest set, if there has been an answer,
	// and then with every new set, never concurrently. After cancel
	// returns fn is not running and is not called again.
	Subscribe(fn func([]registry.Instance)) (cancel func())
	// Close releases the feed.
	Close()
}

// discoveryKey identifies an upstream's discovery settings: a reload that
// keeps them keeps the feed.
func discoveryKey(d *config.UpstreamDiscovery) string {
	if d == nil {
		return ""
	}
	return d.Registry + "|" + discoveryQuery(d).Key()
}

func discoveryQuery(d *config.UpstreamDiscovery) registry.Query {
	return registry.Query{Service: d.Service, Tags: d.Tags, PassingOnly: d.PassingOnly == nil || *d.PassingOnly}
}

// registryHealth maps each instance address to the registry's verdict.
func registryHealth(in []registry.Instance) map[string]registry.Health {
	out := make(map[string]registry.Health, len(in))
	for _, i := range in {
		if _, dup := out[i.HostPort()]; !dup {
			out[i.HostPort()] = i.Health
		}
	}
	return out
}

// setEndpoints makes specs the upstream's membership: the pool, the health
// machinery and the client's idle connections follow. Reloads and feeds
// call it; epMu (shared by every generation of the upstream) orders them.
func (u *Upstream) setEndpoints(specs []endpoint.Spec, health map[string]registry.Health) {
	u.epMu.Lock()
	defer u.epMu.Unlock()
	removed := u.pool.Update(specs)
	all := u.pool.Snapshot().All
	if u.health != nil {
		u.health.sync(all)
		if health != nil {
			now := time.Now()
			for _, ep := range all {
				u.health.onRegistry(ep, health[ep.Address()], now)
			}
		}
	}
	if u.h1 != nil && len(removed) > 0 {
		addrs := make([]string, len(removed))
		for i, ep := range removed {
			addrs[i] = ep.Address()
		}
		u.h1.forget(addrs)
	}
}

// poolSpecs are the specs of the pool's current endpoints.
func poolSpecs(p *endpoint.Pool) []endpoint.Spec {
	all := p.Snapshot().All
	out := make([]endpoint.Spec, len(all))
	for i, ep := range all {
		out[i] = ep.Spec()
	}
	return out
}
