package upstream

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/internal/shardhist"
)

// Metrics are the upstreams' Prometheus metrics: endpoint state changes,
// each endpoint's answers (their latency and status class), the active
// checks, and panic mode. One Metrics serves every upstream of a process
// (WithMetrics); the HTTP proxy and the Go client register the same names.
//
// The per-endpoint series of answers are resolved when an endpoint joins
// the pool and counted by an endpoint.Observer, so that an answer costs a
// histogram observation and an atomic add, not label lookups; the latency
// histogram is sharded (package shardhist), as an endpoint's answers come
// in on every CPU. Their
// cardinality is bounded by the endpoints: the status is counted by class
// (2xx, 4xx...), and an upstream can drop its latency histograms
// (MetricsConfig.PerEndpointHistograms).
type Metrics struct {
	states        *prometheus.CounterVec
	latency       *shardhist.HistogramVec
	responses     *shardhist.CounterVec // every attempt counts: sharded
	checks        *prometheus.CounterVec
	checkDuration *prometheus.HistogramVec
	panicMode     *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	l := []string{"upstream", "endpoint"}
	m := &Metrics{
		states: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_endpoint_state_changes_total",
			Help: "Endpoint state changes made by health checking, by upstream, endpoint and the state entered.",
		}, []string{"upstream", "endpoint", "state"}),
		latency: shardhist.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_endpoint_request_duration_seconds",
			Help:    "Time from picking the endpoint to its response head, of every attempt the endpoint answered, by upstream and endpoint.",
			Buckets: httpmetrics.LatencyBuckets(),
		}, l),
		responses: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_endpoint_responses_total",
			Help: "Responses of the endpoint to every attempt, by upstream, endpoint and status class (1xx to 5xx).",
		}, append(l, "code")),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_health_checks_total",
			Help: "Active health checks, by upstream, endpoint and result (pass, fail).",
		}, append(l, "result")),
		checkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_health_check_duration_seconds",
			Help:    "How long active health checks took, passing or failing, by upstream.",
			Buckets: httpmetrics.LatencyBuckets(),
		}, []string{"upstream"}),
		panicMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_upstream_panic_mode",
			Help: "1 while the upstream is in panic mode (too few ready endpoints: traffic goes to all of them), else 0.",
		}, []string{"upstream"}),
	}
	reg.MustRegister(m.states, m.latency, m.responses, m.checks, m.checkDuration, m.panicMode)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// upstreams and endpoints that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.states.MetricVec, m.latency.MetricVec, m.responses.MetricVec,
		m.checks.MetricVec, m.checkDuration.MetricVec, m.panicMode.MetricVec}
}

func (m *Metrics) stateChanged(upstream, addr string, st endpoint.State) {
	if m != nil {
		m.states.WithLabelValues(upstream, addr, st.String()).Inc()
	}
}

// checked counts one active check of an endpoint.
func (m *Metrics) checked(upstream, addr string, err error, took time.Duration) {
	if m == nil {
		return
	}
	result := "pass"
	if err != nil {
		result = "fail"
	}
	m.checks.WithLabelValues(upstream, addr, result).Inc()
	m.checkDuration.WithLabelValues(upstream).Observe(took.Seconds())
}

func (m *Metrics) setPanic(upstream string, on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.panicMode.WithLabelValues(upstream).Set(v)
}

// dropLatency deletes the latency histograms of upstream's endpoints.
func (m *Metrics) dropLatency(upstream string) {
	if m != nil {
		m.latency.DeletePartialMatch(prometheus.Labels{"upstream": upstream})
	}
}

// endpointSeries are one endpoint's series of answers, and the observer
// that counts its outcomes on them before it hands them on to next (the
// health machinery's observer, or nil).
type endpointSeries struct {
	m                 *Metrics
	upstream, address string
	latency           prometheus.Observer // nil: per-endpoint histograms off
	classes           [5]atomic.Pointer[counterBox]
	next              endpoint.Observer
}

type counterBox struct{ c *shardhist.Counter }

func (m *Metrics) endpointSeries(upstream string, ep *endpoint.Endpoint, histograms bool, next endpoint.Observer) *endpointSeries {
	s := &endpointSeries{m: m, upstream: upstream, address: ep.Address(), next: next}
	if histograms {
		s.latency = m.latency.WithLabelValues(upstream, s.address)
	}
	return s
}

var classNames = [5]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// Observe implements endpoint.Observer. Only answers count: an attempt
// the caller gave up on says nothing of the endpoint, a transport failure
// has no status (switchboard_endpoint_failures_total counts it), and an L4
// connection has neither status nor response head.
func (s *endpointSeries) Observe(ep *endpoint.Endpoint, o endpoint.Outcome) {
	if o.Err == nil && !o.Canceled && o.Status >= 100 && o.Status < 600 {
		if s.latency != nil {
			s.latency.Observe(o.Latency.Seconds())
		}
		i := o.Status/100 - 1
		b := s.classes[i].Load()
		if b == nil {
			b = &counterBox{s.m.responses.WithLabelValues(s.upstream, s.address, classNames[i])}
			s.classes[i].Store(b)
		}
		b.c.Inc()
	}
	if s.next != nil {
		s.next.Observe(ep, o)
	}
}
