package httpproxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP front end's Prometheus metrics: requests answered,
// their duration and those in flight. Per-request series are resolved once
// per route and status code and cached, so a request costs atomic adds,
// not label lookups. What happens between routing and answering is counted
// by the pipeline's and the upstreams' own metrics.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_requests_total",
			Help: "HTTP requests answered, by listener, route, upstream and status code.",
		}, []string{"listener", "route", "upstream", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_http_request_duration_seconds",
			Help:    "Time from routing a request to the end of its response, by route and upstream.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"listener", "route", "upstream"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_http_requests_in_flight",
			Help: "HTTP requests being served, by listener.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.requests, m.duration, m.inflight)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// listeners and routes that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.requests.MetricVec, m.duration.MetricVec, m.inflight.MetricVec}
}

// routeMetrics caches one route's series.
type routeMetrics struct {
	m                        *Metrics
	listener, route, upsName string
	duration                 prometheus.Observer
	inflight                 prometheus.Gauge
	codes                    [600]atomic.Pointer[counterBox]
}

type counterBox struct{ c prometheus.Counter }

func (m *Metrics) forRoute(listener, route, upstream string) *routeMetrics {
	return &routeMetrics{
		m: m, listener: listener, route: route, upsName: upstream,
		duration: m.duration.WithLabelValues(listener, route, upstream),
		inflight: m.inflight.WithLabelValues(listener),
	}
}

func (rm *routeMetrics) count(code int) {
	if code < 0 || code >= len(rm.codes) {
		code = 0
	}
	b := rm.codes[code].Load()
	if b == nil {
		b = &counterBox{rm.m.requests.WithLabelValues(rm.listener, rm.route, rm.upsName, strconv.Itoa(code))}
		rm.codes[code].Store(b)
	}
	b.c.Inc()
}
