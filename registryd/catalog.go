package registryd

import (
	"cmp"
	"slices"
)

// CatalogInstance is one registered instance and its checks, as the
// admin API and the dashboard show it.
type CatalogInstance struct {
	ID      string         `json:"id"`
	Service string         `json:"service"`
	Address string         `json:"address"`
	Port    int            `json:"port"`
	Tags    []string       `json:"tags,omitempty"`
	Checks  []CatalogCheck `json:"checks"`
}

// CatalogCheck is one check of an instance and its last result.
type CatalogCheck struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Output string `json:"output,omitempty"`
}

// Catalog returns every registered instance with its checks, sorted by
// service and id. Outputs are cut to 512 bytes.
func (s *Server) Catalog() []CatalogInstance {
	s.mu.RLock()
	out := make([]CatalogInstance, 0, len(s.services))
	for _, ss := range s.services {
		d := ss.def
		ci := CatalogInstance{ID: d.ID, Service: d.Name, Address: d.Address, Port: d.Port, Tags: d.Tags, Checks: make([]CatalogCheck, 0, len(ss.checks))}
		for _, c := range ss.checks {
			o := c.output
			if len(o) > 512 {
				o = o[:512]
			}
			ci.Checks = append(ci.Checks, CatalogCheck{ID: c.def.CheckID, Name: c.def.Name, Type: c.def.Type, Status: c.status, Output: o})
		}
		out = append(out, ci)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b CatalogInstance) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.ID, b.ID))
	})
	return out
}
