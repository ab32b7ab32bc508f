package client

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// listener is the listener label of the client's request metrics: the
// proxy's metrics, with the client in the place of a listener.
const listener = "client"

// requestMetrics are the HTTP proxy's request metrics, under the same
// names and labels, for the calls made through the client.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
}

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_http_requests_total",
		Help: "HTTP requests answered, by listener, route, upstream and status code.",
	}, []string{"listener", "route", "upstream", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_http_request_duration_seconds",
		Help:    "Time from routing a request to the end of its response, by route and upstream.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"listener", "route", "upstream"})
	inflight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_http_requests_in_flight",
		Help: "HTTP requests being served, by listener.",
	}, []string{"listener"})
	reg.MustRegister(requests, duration, inflight)
	return &requestMetrics{requests: requests, duration: duration, inflight: inflight.WithLabelValues(listener)}
}

// routeMetrics are one route's series, resolved once (and per status code
// on first use), so that a call costs atomic adds. A nil *routeMetrics
// counts nothing.
type routeMetrics struct {
	m               *requestMetrics
	route, upstream string
	duration        prometheus.Observer
	codes           [600]atomic.Pointer[prometheus.Counter]
}

func (m *requestMetrics) forRoute(route, upstream string) *routeMetrics {
	if m == nil {
		return nil
	}
	return &routeMetrics{m: m, route: route, upstream: upstream, duration: m.duration.WithLabelValues(listener, route, upstream)}
}

func (rm *routeMetrics) start() {
	if rm != nil {
		rm.m.inflight.Inc()
	}
}

// done counts a finished call: its status (499 when the caller went away)
// and its duration to the end of its response body.
func (rm *routeMetrics) done(status int, start time.Time) {
	if rm == nil {
		return
	}
	rm.m.inflight.Dec()
	rm.duration.Observe(time.Since(start).Seconds())
	if status < 0 || status >= len(rm.codes) {
		status = 0
	}
	c := rm.codes[status].Load()
	if c == nil {
		v := rm.m.requests.WithLabelValues(listener, rm.route, rm.upstream, strconv.Itoa(status))
		c = &v
		rm.codes[status].Store(c)
	}
	(*c).Inc()
}
