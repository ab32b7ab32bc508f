package httpproxy

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The HTTP side's series whose listener, route, upstream or endpoint is
// gone are deleted: routes come and go with auto routes and reloads,
// endpoints with discovery, and without this every address a fleet ever
// used would stay in /metrics for the life of the process. A series goes
// once its owner has been missing at two sweeps in a row, so it stays for
// at least one interval after the owner was last seen: time for scrapes
// to see its last value. The owners of a routing table count as present
// until the sweep after the table was replaced, and for as long as it
// still serves requests (a long stream or tunnel on a removed route):
// those requests count on series they cached, which must not be deleted
// under them. client_golang's Delete is meant for this ("useful for
// metrics of objects that disappear"); Prometheus reads a series that
// comes back as a counter reset. proxy/tcpproxy, whose series are all cached
// by objects with a clear end, counts references instead
// (tcpproxy.Metrics).
const metricsSweepEvery = 5 * time.Minute

// liveSet names what exists now. A label a set does not know (code,
// reason, kind...) never makes a series stale.
type liveSet struct {
	listeners, routes, upstreams map[string]bool
	// routeSeries are the (listener, route, upstream) label sets of the
	// routing tables' cached series; route "" is the no-route series.
	routeSeries map[[3]string]bool
	endpoints   map[[2]string]bool // upstream, address
}

// addTable adds the owners of t's series: its listener, and the
// (listener, route, upstream) and route of each route and of the no-route
// series.
func (l *liveSet) addTable(t *table) {
	l.listeners[t.listener] = true
	l.routeSeries[[3]string{t.listener, t.noRoute.route, t.noRoute.upsName}] = true
	for _, rt := range t.routes {
		l.routes[rt.metrics.route] = true
		l.routeSeries[[3]string{t.listener, rt.metrics.route, rt.metrics.upsName}] = true
	}
}

func newLiveSet() *liveSet {
	return &liveSet{listeners: map[string]bool{}, routes: map[string]bool{}, upstreams: map[string]bool{},
		routeSeries: map[[3]string]bool{}, endpoints: map[[2]string]bool{}}
}

// owns reports whether the owners named in labels still exist: a
// listener-and-route series its exact table entry, a route series its
// route, and an upstream or endpoint series its upstream or endpoint.
func (l *liveSet) owns(labels []*dto.LabelPair) bool {
	var listener, route, upstream, ep string
	var hasListener, hasRoute, hasUpstream, hasEP bool
	for _, lp := range labels {
		switch v := lp.GetValue(); lp.GetName() {
		case "listener":
			listener, hasListener = v, true
		case "route":
			route, hasRoute = v, true
		case "upstream":
			upstream, hasUpstream = v, true
		case "endpoint":
			ep, hasEP = v, true
		}
	}
	switch {
	case hasListener && hasRoute:
		return l.routeSeries[[3]string{listener, route, upstream}]
	case hasListener && !l.listeners[listener]:
		return false
	case hasRoute && !l.routes[route]:
		return false
	case hasUpstream && !l.upstreams[upstream]:
		return false
	}
	return !hasEP || l.endpoints[[2]string{upstream, ep}]
}

// sweeper deletes the series of vectors whose owners are gone.
type sweeper struct {
	vecs []*prometheus.MetricVec
	dead map[string]bool // series found without an owner at the last sweep; under Server.mu
}

// sweep deletes series without an owner in live now and at the previous
// sweep, and returns how many it deleted.
func (s *sweeper) sweep(live *liveSet) int {
	dead := map[string]bool{}
	deleted := 0
	for i, v := range s.vecs {
		var gone []prometheus.Labels
		for _, lp := range collectLabels(v) {
			if live.owns(lp) {
				continue
			}
			key := seriesKey(i, lp)
			if !s.dead[key] {
				dead[key] = true
				continue
			}
			labels := make(prometheus.Labels, len(lp))
			for _, p := range lp {
				labels[p.GetName()] = p.GetValue()
			}
			gone = append(gone, labels)
		}
		// Deleted after the collection: Collect holds the vector's lock
		// while it sends.
		for _, labels := range gone {
			if v.Delete(labels) {
				deleted++
			}
		}
	}
	s.dead = dead
	return deleted
}

// collectLabels returns the label pairs of each of v's series.
func collectLabels(v *prometheus.MetricVec) [][]*dto.LabelPair {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	var out [][]*dto.LabelPair
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			out = append(out, d.GetLabel())
		}
	}
	return out
}

func seriesKey(vec int, labels []*dto.LabelPair) string {
	var b strings.Builder
	b.WriteByte(byte(vec))
	for _, lp := range labels {
		b.WriteByte(0)
		b.WriteString(lp.GetName())
		b.WriteByte(0)
		b.WriteString(lp.GetValue())
	}
	return b.String()
}

// retire records a routing table that was replaced or whose listener was
// removed; s.mu is held.
func (s *Server) retire(t *table) {
	if s.recent == nil {
		s.recent = newLiveSet()
	}
	s.recent.addTable(t)
	// Keep only tables still serving (and this one, which a request may
	// have loaded a moment ago and not yet counted): this bounds the list
	// however often auto routes rebuild between sweeps.
	s.retiring = append(dropIdle(s.retiring), t)
}

// dropIdle removes the tables that serve no request.
func dropIdle(ts []*table) []*table {
	return slices.DeleteFunc(ts, func(t *table) bool { return t.active.Load() == 0 })
}

// liveLocked collects the owners present now: those of the running
// routing tables, of tables replaced since the last sweep or still serving
// requests, the upstreams and their pools' endpoints. It starts the next
// period of replaced tables; s.mu is held.
func (s *Server) liveLocked() *liveSet {
	l := s.recent
	if l == nil {
		l = newLiveSet()
	}
	s.recent = nil
	for _, ln := range s.listeners {
		if t := ln.handler.tbl.Load(); t != nil {
			l.addTable(t)
		}
	}
	s.retiring = dropIdle(s.retiring)
	for _, t := range s.retiring {
		l.addTable(t)
	}
	for name, u := range s.upstreams {
		l.upstreams[name] = true
		for _, ep := range u.pool.Snapshot().All {
			l.endpoints[[2]string{name, ep.Address()}] = true
		}
	}
	return l
}

// sweepMetrics runs one sweep. It holds s.mu throughout, so that an Apply
// or an auto-route rebuild cannot bring back an owner between the look at
// what exists and the deletion.
func (s *Server) sweepMetrics() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics.sweep.sweep(s.liveLocked())
}

// sweepLoop sweeps every metricsSweepEvery until ctx ends.
func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(metricsSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := s.sweepMetrics(); n > 0 {
				s.log.Debug("metrics: deleted series of removed listeners, routes, upstreams or endpoints", "series", n)
			}
		}
	}
}
