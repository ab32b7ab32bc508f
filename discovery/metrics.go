package discovery

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/internal/seriesref"
)

// Metrics exports the state of every view of the Discoveries that use it:
//
//	switchboard_discovery_stale{registry,service}         1 while stale, else 0
//	switchboard_discovery_age_seconds{registry,service}   see ServiceStatus.AgeSeconds
//	switchboard_discovery_instances{registry,service}     instances served
//	switchboard_discovery_errors_total{registry,service}  failed registry attempts
//
// Several queries of one service (different tags, passing or not) share one
// series: stale is 1 if any of them is, age is the oldest, instances the
// largest, errors the sum.
type Metrics struct {
	errors *prometheus.CounterVec
	// errRefs counts the watch loops of each (registry, service) holding
	// their errors series: it goes errorsGrace after the last one ends,
	// so services that come and go do not stay in /metrics for ever.
	errRefs *seriesref.Refs[[2]string]

	stale, age, instances *prometheus.Desc

	mu sync.Mutex
	ds map[*Discovery]struct{}
}

// NewMetrics creates the discovery metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_discovery_errors_total",
			Help: "Failed registry attempts (watch or list) of a discovered service.",
		}, []string{"registry", "service"}),
		stale: prometheus.NewDesc("switchboard_discovery_stale",
			"1 while a discovered service is served from a stale view (registry error, disk cache or empty guard), else 0.",
			[]string{"registry", "service"}, nil),
		age: prometheus.NewDesc("switchboard_discovery_age_seconds",
			"0 while the registry answers; otherwise seconds since the view was last known current.",
			[]string{"registry", "service"}, nil),
		instances: prometheus.NewDesc("switchboard_discovery_instances",
			"Instances a discovered service's view serves.",
			[]string{"registry", "service"}, nil),
		ds: map[*Discovery]struct{}{},
	}
	m.errRefs = seriesref.New(errorsGrace, func(k [2]string) { m.errors.DeleteLabelValues(k[0], k[1]) })
	reg.MustRegister(m.errors, (*gauges)(m))
	return m
}

// errorsGrace is how long a service's errors series outlives its last
// watch loop: scrapes see its last value.
const errorsGrace = 2 * time.Minute

func (m *Metrics) add(d *Discovery) {
	m.mu.Lock()
	m.ds[d] = struct{}{}
	m.mu.Unlock()
}

func (m *Metrics) remove(d *Discovery) {
	m.mu.Lock()
	delete(m.ds, d)
	m.mu.Unlock()
}

// gauges computes the gauges at scrape time from Status, so that the age
// is current without a ticker.
type gauges Metrics

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.stale
	ch <- g.age
	ch <- g.instances
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	type key struct{ registry, service string }
	type agg struct {
		stale     bool
		age       float64
		instances int
	}
	g.mu.Lock()
	ds := make([]*Discovery, 0, len(g.ds))
	for d := range g.ds {
		ds = append(ds, d)
	}
	g.mu.Unlock()
	all := map[key]*agg{}
	for _, d := range ds {
		for _, s := range d.Status() {
			k := key{s.Registry, s.Service}
			a := all[k]
			if a == nil {
				a = &agg{}
				all[k] = a
			}
			a.stale = a.stale || s.Stale
			a.age = max(a.age, s.AgeSeconds)
			a.instances = max(a.instances, s.Instances)
		}
	}
	for k, a := range all {
		stale := 0.0
		if a.stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(g.stale, prometheus.GaugeValue, stale, k.registry, k.service)
		ch <- prometheus.MustNewConstMetric(g.age, prometheus.GaugeValue, a.age, k.registry, k.service)
		ch <- prometheus.MustNewConstMetric(g.instances, prometheus.GaugeValue, float64(a.instances), k.registry, k.service)
	}
}
