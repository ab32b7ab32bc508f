// Package httpmetrics holds the request metrics of switchboard's HTTP front
// ends — the proxy's listeners and the Go client — under one set of names
// and labels: requests answered, their duration, their body bytes and
// those in flight, by listener (the client's calls count under listener
// "client"), route, upstream and status code; and the proxy's own: the
// time its upstreams take to answer with a response head. What happens between routing and
// answering is counted by the pipeline's and the upstreams' own metrics.
package httpmetrics

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/internal/shardhist"
)

// Metrics are the metric vectors. Per-request series are resolved once per
// route (and per status code on first use) by Route, so that a request
// costs atomic adds, not label lookups. The per-request series (counters,
// histograms, the in-flight gauge) are sharded (package shardhist), so that
// the event loops, one per CPU, do not pass their cache lines back and
// forth.
type Metrics struct {
	requests      *shardhist.CounterVec
	duration      *shardhist.HistogramVec
	inflight      *shardhist.GaugeVec
	requestBytes  *shardhist.CounterVec
	responseBytes *shardhist.CounterVec
	header        *shardhist.HistogramVec
	coding        codingVecs
	access        accessVecs
	logDropped    *prometheus.CounterVec
}

// latencyBuckets are the buckets of every latency histogram of
// switchboard's: from half a millisecond to half a minute.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// LatencyBuckets returns the histogram buckets switchboard's latency
// series share (in seconds), so that their quantiles compare.
func LatencyBuckets() []float64 { return append([]float64(nil), latencyBuckets...) }

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_requests_total",
			Help: "HTTP requests answered, by listener, route, upstream and status code (route \"\": no route matched).",
		}, []string{"listener", "route", "upstream", "code"}),
		duration: shardhist.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_http_request_duration_seconds",
			Help:    "Time from routing a request to the end of its response, by route and upstream; requests that matched no route are not observed.",
			Buckets: latencyBuckets,
		}, []string{"listener", "route", "upstream"}),
		inflight: shardhist.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_http_requests_in_flight",
			Help: "HTTP requests being served, by listener.",
		}, []string{"listener"}),
		requestBytes: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_request_bytes_total",
			Help: "Request body bytes read from clients, by listener and route.",
		}, []string{"listener", "route"}),
		responseBytes: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_response_bytes_total",
			Help: "Response body bytes written to clients, by listener and route.",
		}, []string{"listener", "route"}),
		header: shardhist.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_upstream_response_header_seconds",
			Help:    "Time from sending a request to an endpoint of the upstream to its response head (time to first byte), by upstream.",
			Buckets: latencyBuckets,
		}, []string{"upstream"}),
		coding: newCodingVecs(),
		logDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_access_log_dropped_total",
			Help: "Access log lines an event-loop listener dropped because its queue to the log writer was full (the loop never waits for the log), by listener.",
		}, []string{"listener"}),
	}
	m.access = newAccessVecs()
	reg.MustRegister(m.requests, m.duration, m.inflight, m.requestBytes, m.responseBytes, m.header,
		m.coding.responses, m.coding.in, m.coding.out, m.access.denied, m.access.bcrypt, m.logDropped)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// listeners, routes and upstreams that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return append([]*prometheus.MetricVec{m.requests.MetricVec, m.duration.MetricVec, m.inflight.MetricVec,
		m.requestBytes.MetricVec, m.responseBytes.MetricVec, m.header.MetricVec,
		m.access.denied.MetricVec, m.access.bcrypt.MetricVec, m.logDropped.MetricVec}, m.coding.vecs()...)
}

// AccessLogDropped returns listener's count of dropped access log lines
// (nil for a nil *Metrics).
func (m *Metrics) AccessLogDropped(listener string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.logDropped.WithLabelValues(listener)
}

// ResponseHeader returns the series of upstream's time to a response head
// (nil for a nil *Metrics), for the transport of its endpoints to observe
// in seconds. The series is made on the first observation: an upstream
// that only tcp listeners use has none.
func (m *Metrics) ResponseHeader(upstream string) prometheus.Observer {
	if m == nil {
		return nil
	}
	return &lazyObserver{vec: m.header, label: upstream}
}

// lazyObserver resolves its series on first use.
type lazyObserver struct {
	vec   *shardhist.HistogramVec
	label string
	o     atomic.Pointer[observerBox]
}

type observerBox struct{ o prometheus.Observer }

func (l *lazyObserver) Observe(v float64) {
	b := l.o.Load()
	if b == nil {
		b = &observerBox{l.vec.WithLabelValues(l.label)}
		l.o.Store(b)
	}
	b.o.Observe(v)
}

// Route is one route's series. A nil *Route counts nothing.
type Route struct {
	m                         *Metrics
	listener, route, upstream string
	duration                  prometheus.Observer // nil for the no-route series
	inflight                  *shardhist.Gauge    // every request moves it, on any loop: sharded
	codes                     [600]atomic.Pointer[countBox]
	access                    routeAccess
	bytes                     atomic.Pointer[bytesBox]
}

type counterBox struct{ c prometheus.Counter }

type countBox struct{ c *shardhist.Counter }

type bytesBox struct{ in, out *shardhist.Counter }

// Route returns the series of a route of listener over upstream; route ""
// is the listener's requests that matched no route, which are counted
// (Count) but have no duration series: a histogram that stays empty, or
// holds only how long a 404 took to write, says nothing. A nil *Metrics
// gives a nil *Route.
func (m *Metrics) Route(listener, route, upstream string) *Route {
	if m == nil {
		return nil
	}
	r := &Route{
		m: m, listener: listener, route: route, upstream: upstream,
		inflight: m.inflight.WithLabelValues(listener),
	}
	if route != "" {
		r.duration = m.duration.WithLabelValues(listener, route, upstream)
	}
	return r
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
	if r.duration != nil {
		r.duration.Observe(seconds)
	}
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
		b = &countBox{r.m.requests.WithLabelValues(r.listener, r.route, r.upstream, strconv.Itoa(status))}
		r.codes[status].Store(b)
	}
	b.c.Inc()
}

// Bytes counts the body bytes of one request: in read from the client, out
// written to it. The series are resolved on first use, so a front end that
// does not count bytes has none.
func (r *Route) Bytes(in, out int64) {
	if r == nil {
		return
	}
	b := r.bytes.Load()
	if b == nil {
		b = &bytesBox{r.m.requestBytes.WithLabelValues(r.listener, r.route), r.m.responseBytes.WithLabelValues(r.listener, r.route)}
		r.bytes.Store(b)
	}
	if in > 0 {
		b.in.Add(uint64(in))
	}
	if out > 0 {
		b.out.Add(uint64(out))
	}
}
