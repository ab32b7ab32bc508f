package plane

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The series of listeners, routes, upstreams and endpoints that are gone
// are deleted: routes come and go with auto routes and reloads, endpoints
// with discovery, and without this every address a fleet ever used would
// stay in /metrics for the life of the process. A series goes once its
// owner has been missing at two sweeps in a row, so it stays for at least
// one interval after the owner was last seen: time for scrapes to see its
// last value. The owners of a routing table count as present until the
// sweep after the table was replaced, and for as long as it still serves
// requests (a long stream or tunnel on a removed route): those requests
// count on series they cached, which must not be deleted under them.
// client_golang's Delete is meant for this ("useful for metrics of objects
// that disappear"); Prometheus reads a series that comes back as a counter
// reset. proxy/tcpproxy, whose series are all cached by objects with a
// clear end, counts references instead (tcpproxy.Metrics).
const metricsSweepEvery = 5 * time.Minute

// sweeping is the plane's sweep: the vectors it looks at, the series found
// without an owner last time, when that was, and its loop.
type sweeping struct {
	vecs []*prometheus.MetricVec
	dead map[string]bool
	last time.Time
	loop *loop
}

// liveSet names what exists now. A label a set does not know (code,
// reason, kind...) never makes a series stale.
type liveSet struct {
	listeners, routes, upstreams map[string]bool
	// routeSeries are the (listener, route, upstream) label sets of the
	// routing tables' cached series; route "" is the no-route series.
	routeSeries map[[3]string]bool
	// listenerRoutes are their (listener, route) pairs, the owners of
	// the series without an upstream label (body bytes).
	listenerRoutes map[[2]string]bool
	endpoints      map[[2]string]bool // upstream, address
}

func newLiveSet() *liveSet {
	return &liveSet{listeners: map[string]bool{}, routes: map[string]bool{}, upstreams: map[string]bool{},
		routeSeries: map[[3]string]bool{}, listenerRoutes: map[[2]string]bool{}, endpoints: map[[2]string]bool{}}
}

// addSeries adds the owners of a routing table's series.
func (l *liveSet) addSeries(listener, route, upstream string) {
	l.listeners[listener] = true
	if route != "" {
		l.routes[route] = true
	}
	l.routeSeries[[3]string{listener, route, upstream}] = true
	l.listenerRoutes[[2]string{listener, route}] = true
}

// owns reports whether the owners named in labels still exist: a
// listener-and-route series its exact table entry (without an upstream
// label, any entry of that listener and route), a route series its route,
// and an upstream or endpoint series its upstream or endpoint.
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
	case hasListener && hasRoute && !hasUpstream:
		return l.listenerRoutes[[2]string{listener, route}]
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

// live collects the owners present now; p.mu is held.
func (p *Plane) live(now time.Time) *liveSet {
	l := newLiveSet()
	p.http.Series(p.sweeping.last, l.addSeries)
	p.sweeping.last = now
	for name, u := range p.ups {
		l.upstreams[name] = true
		for _, ep := range u.up.Pool().Snapshot().All {
			l.endpoints[[2]string{name, ep.Address()}] = true
		}
	}
	return l
}

// SweepMetrics runs one sweep now and returns how many series it deleted.
// It holds the plane's lock throughout, so that an Apply or an auto-route
// rebuild cannot bring back an owner between the look at what exists and
// the deletion.
func (p *Plane) SweepMetrics() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.live(time.Now())
	s := &p.sweeping
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
			for _, pair := range lp {
				labels[pair.GetName()] = pair.GetValue()
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

// startSweep starts the sweep loop once; p.mu is held.
func (p *Plane) startSweep() {
	if p.sweeping.loop != nil {
		return
	}
	p.sweeping.last = time.Now()
	p.sweeping.loop = startLoop(func(ctx context.Context) {
		t := time.NewTicker(metricsSweepEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if n := p.SweepMetrics(); n > 0 {
					p.log.Debug("metrics: deleted series of removed listeners, routes, upstreams or endpoints", "series", n)
				}
			}
		}
	})
}
