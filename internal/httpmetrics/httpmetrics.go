// Package httpmetrics holds the request metrics of switchboard's HTTP front
// ends — the proxy's listeners and the Go client — under one set of names
// and labels: requests answered, their duration and those in flight, by
// listener (the client's calls count under listener "client"), route,
// upstream and status code. What happens between routing and answering is
// counted by the pipeline's and the upstreams' own metrics.
package httpmetrics

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the metric vectors. Per-request series are resolved once per
// route (and per status code on first use) by Route, so that a request
// costs atomic adds, not label lookups.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	coding   codingVecs
	access   accessVecs
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
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
		coding: newCodingVecs(),
	}
	m.access = newAccessVecs()
	reg.MustRegister(m.requests, m.duration, m.inflight, m.coding.responses, m.coding.in, m.coding.out, m.access.denied, m.access.bcrypt)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// listeners and routes that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return append([]*prometheus.MetricVec{m.requests.MetricVec, m.duration.MetricVec, m.inflight.MetricVec,
		m.access.denied.MetricVec, m.access.bcrypt.MetricVec}, m.coding.vecs()...)
}

// Route is one route's series. A nil *Route counts nothing.
type Route struct {
	m                         *Metrics
	listener, route, upstream string
	duration                  prometheus.Observer
	inflight                  prometheus.Gauge
	codes                     [600]atomic.Pointer[counterBox]
	access                    routeAccess
}

type counterBox struct{ c prometheus.Counter }

// Route returns the series of a route of listener over upstream. A nil
// *Metrics gives a nil *Route.
func (m *Metrics) Route(listener, route, upstream string) *Route {
	if m == nil {
		return nil
	}
	return &Route{
		m: m, listener: listener, route: route, upstream: upstream,
		duration: m.duration.WithLabelValues(listener, route, upstream),
		inflight: m.inflight.WithLabelValues(listener),
	}
}

// Labels returns the route's listener, route and upstream labels.
func (r *Route) Labels() (listener, route, upstream string) {
	return r.listener, r.route, r.upstream
}

// Start counts a request in flight.
func (r *Route) Start() {
	if r != nil {
		r.inflight.Inc()
	}
}

// Done counts a request that Start counted as finished: its status and its
// duration in seconds.
func (r *Route) Done(status int, seconds float64) {
	if r == nil {
		return
	}
	r.inflight.Dec()
	r.duration.Observe(seconds)
	r.Count(status)
}

// Count counts an answer with status that was never in flight (a request
// refused before routing). A status outside 0-599 counts as 0.
func (r *Route) Count(status int) {
	if r == nil {
		return
	}
	if status < 0 || status >= len(r.codes) {
		status = 0
	}
	b := r.codes[status].Load()
	if b == nil {
		b = &counterBox{r.m.requests.WithLabelValues(r.listener, r.route, r.upstream, strconv.Itoa(status))}
		r.codes[status].Store(b)
	}
	b.c.Inc()
}
