package httpproxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	tcpproxy "github.com/switchboard-dev/switchboard/proxy/tcpproxy"
)

// Metrics are the HTTP data plane's Prometheus metrics. Per-request series
// are resolved once per route and status code and cached, so a request
// costs atomic adds, not label lookups.
type Metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	inflight   *prometheus.GaugeVec
	retries    *prometheus.CounterVec
	errors     *prometheus.CounterVec
	limits     *limitMetrics
	states     *prometheus.CounterVec
	resilience *resilienceMetrics
	tcp        *tcpproxy.Metrics
	sweep      sweeper // deletes HTTP series whose owner is gone (sweep.go)
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
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_upstream_retries_total",
			Help: "Upstream attempts made again on another endpoint, by upstream and reason.",
		}, []string{"upstream", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_upstream_errors_total",
			Help: "Failed upstream attempts, by upstream, endpoint and kind (connect, timeout, reset).",
		}, []string{"upstream", "endpoint", "kind"}),
	}
	reg.MustRegister(m.requests, m.duration, m.inflight, m.retries, m.errors)
	m.limits = newLimitMetrics(reg)
	m.states = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_endpoint_state_changes_total",
		Help: "Endpoint state changes made by health checking, by upstream, endpoint and the state entered.",
	}, []string{"upstream", "endpoint", "state"})
	reg.MustRegister(m.states)
	m.resilience = newResilienceMetrics(reg)
	m.tcp = tcpproxy.NewMetrics(reg)
	m.sweep.vecs = []*prometheus.MetricVec{
		m.requests.MetricVec, m.duration.MetricVec, m.inflight.MetricVec, m.retries.MetricVec,
		m.errors.MetricVec, m.states.MetricVec,
		m.limits.decisions.MetricVec, m.limits.redisErrors.MetricVec, m.limits.bulkhead.MetricVec,
		m.resilience.breakerState.MetricVec, m.resilience.breakerTransitions.MetricVec,
		m.resilience.fallbacks.MetricVec,
	} // not the tcp ones: proxy/tcpproxy deletes its own series
	return m
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
