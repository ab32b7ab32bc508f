package discovery

import (
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/registry"
)

// Specs converts instances to endpoint specs for endpoint.Pool.Update:
// address host:port, the instance ID, weight (at least 1), zone and
// metadata (shared, not copied: neither side modifies it).
func Specs(insts []registry.Instance) []endpoint.Spec {
	specs := make([]endpoint.Spec, len(insts))
	for i, in := range insts {
		specs[i] = endpoint.Spec{
			Address: in.HostPort(),
			ID:      in.ID,
			Weight:  in.EffectiveWeight(),
			Zone:    in.Zone,
			Meta:    in.Meta,
		}
	}
	return specs
}
