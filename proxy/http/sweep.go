package httpproxy

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series whose listener, route, upstream or endpoint is gone are deleted:
// routes come and go with auto routes and reloads, endpoints with
// discovery, and without this every address a fleet ever used would stay
// in /metrics for the life of the process. A series goes once its owner
// has been missing at two sweeps in a row, so it stays for at least one
// interval after the owner left: time for scrapes to see its last value.
// (client_golang's Delete is meant for this: "useful for metrics of
// objects that disappear".) Prometheus reads a series that comes back as
// a counter reset.
const metricsSweepEvery = 5 * time.Minute

// liveSet names what exists now. A label a set does not know (code,
// reason, kind...) never makes a series stale.
type liveSet struct {
	listeners, routes, upstreams map[string]bool
	endpoints                    map[[2]string]bool // upstream, address
}

func newLiveSet() *liveSet {
	return &liveSet{listeners: map[string]bool{}, routes: map[string]bool{}, upstreams: map[string]bool{},
		endpoints: map[[2]string]bool{}}
}

// owns reports whether every owner named in labels still exists.
func (l *liveSet) owns(labels []*dto.LabelPair) bool {
	var upstream, ep string
	var hasEP bool
	for _, lp := range labels {
		v := lp.GetValue()
		switch lp.GetName() {
		case "listener":
			if !l.listeners[v] {
				return false
			}
		case "route":
			if !l.routes[v] {
				return false
			}
		case "upstream":
			if !l.upstreams[v] {
				return false
			}
			upstream = v
		case "endpoint":
			ep, hasEP = v, true
		}
	}
	return !hasEP || l.endpoints[[2]string{upstream, ep}]
}

// sweeper deletes the series of vectors whose owners are gone.
type sweeper struct {
	vecs []*prometheus.MetricVec
	mu   sync.Mutex
	dead map[string]bool // series found without an owner at the last sweep
}

// sweep deletes series without an owner in live now and at the previous
// sweep, and returns how many it deleted.
func (s *sweeper) sweep(live *liveSet) int {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// liveLocked collects the listeners, routes, upstreams and endpoints that
// exist now; s.mu is held. Endpoints are those in the pools, and those a
// tcp listener still has connections to (an endpoint that left its pool
// keeps its series while its connections last).
func (s *Server) liveLocked() *liveSet {
	l := newLiveSet()
	for name := range s.listeners {
		l.listeners[name] = true
	}
	for name, t := range s.tcp {
		l.listeners[name] = true
		for _, e := range t.l.Stats().Endpoints {
			if e.Active > 0 {
				l.endpoints[[2]string{e.Upstream, e.Address}] = true
			}
		}
	}
	l.routes[""] = true // requests that matched no route
	for name := range s.routeStates {
		l.routes[name] = true
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
// cannot bring back an owner between the look at what exists and the
// deletion.
func (s *Server) sweepMetrics() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics.sweep.sweep(s.liveLocked())
}

// sweepLoop sweeps every metricsSweepEvery until ctx ends.
func (s *Server) sweepLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
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
