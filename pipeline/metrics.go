package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/breaker"
)

// Metrics are the pipelines' Prometheus metrics: retries, upstream errors,
// rate-limit and concurrency decisions, breakers and fallbacks. One Metrics
// serves every route of a process (WithMetrics); the HTTP proxy and the Go
// client register the same names. A nil *Metrics counts nothing.
type Metrics struct {
	retries            *prometheus.CounterVec
	errors             *prometheus.CounterVec
	decisions          *prometheus.CounterVec
	redisErrors        *prometheus.CounterVec
	concurrency        *prometheus.CounterVec
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	fallbacks          *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_upstream_retries_total",
			Help: "Upstream attempts made again on another endpoint, by upstream and reason.",
		}, []string{"upstream", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_upstream_errors_total",
			Help: "Failed upstream attempts, by upstream, endpoint and kind (connect, tls, timeout, reset).",
		}, []string{"upstream", "endpoint", "kind"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ratelimit_decisions_total",
			Help: "Rate limit decisions, by route, limiter and decision (allowed, delayed, rejected).",
		}, []string{"route", "limiter", "decision"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ratelimit_redis_errors_total",
			Help: "Failed or timed-out Redis calls of global rate limits, by route and limiter.",
		}, []string{"route", "limiter"}),
		concurrency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_concurrency_rejections_total",
			Help: "Requests refused by a concurrency limit, by route and the limit's scope (route or upstream).",
		}, []string{"route", "scope"}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_breaker_state",
			Help: "A route breaker's state: 0 closed, 1 open, 2 half-open.",
		}, []string{"route"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_breaker_transitions_total",
			Help: "Route breaker state changes, by route and the state entered.",
		}, []string{"route", "to"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_fallback_responses_total",
			Help: "Degraded responses served by a fallback step, by route, step and trigger.",
		}, []string{"route", "step", "reason"}),
	}
	reg.MustRegister(m.retries, m.errors, m.decisions, m.redisErrors, m.concurrency,
		m.breakerState, m.breakerTransitions, m.fallbacks)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// routes, upstreams and endpoints that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{
		m.retries.MetricVec, m.errors.MetricVec, m.decisions.MetricVec, m.redisErrors.MetricVec,
		m.concurrency.MetricVec, m.breakerState.MetricVec, m.breakerTransitions.MetricVec, m.fallbacks.MetricVec,
	}
}

// counter is a resolved series, or nothing without metrics.
type counter struct{ c prometheus.Counter }

func (c counter) inc() {
	if c.c != nil {
		c.c.Inc()
	}
}

// limiterSeries resolves a limiter's decision series once, so that a
// request costs atomic adds, not label lookups.
func (m *Metrics) limiterSeries(route, limiter string) (allowed, delayed, rejected counter) {
	if m == nil {
		return
	}
	d := m.decisions
	return counter{d.WithLabelValues(route, limiter, "allowed")}, counter{d.WithLabelValues(route, limiter, "delayed")},
		counter{d.WithLabelValues(route, limiter, "rejected")}
}

func (m *Metrics) redisError(route, limiter string) {
	if m != nil {
		m.redisErrors.WithLabelValues(route, limiter).Inc()
	}
}

// concurrencySeries resolves a route's rejection series, for its own
// limit and its upstream's, once.
func (m *Metrics) concurrencySeries(route string) (out [2]counter) {
	if m != nil {
		out[0] = counter{m.concurrency.WithLabelValues(route, "route")}
		out[1] = counter{m.concurrency.WithLabelValues(route, "upstream")}
	}
	return out
}

func (m *Metrics) retried(upstream, reason string) {
	if m != nil {
		m.retries.WithLabelValues(upstream, reason).Inc()
	}
}

func (m *Metrics) upstreamError(upstream, addr, kind string) {
	if m != nil {
		m.errors.WithLabelValues(upstream, addr, kind).Inc()
	}
}

// breakerStarted records a new route breaker, closed.
func (m *Metrics) breakerStarted(route string) {
	if m != nil {
		m.breakerState.WithLabelValues(route).Set(float64(breaker.Closed))
	}
}

// breakerChanged records a route breaker's transition.
func (m *Metrics) breakerChanged(route string, to breaker.State) {
	if m != nil {
		m.breakerState.WithLabelValues(route).Set(float64(to))
		m.breakerTransitions.WithLabelValues(route, to.String()).Inc()
	}
}

func (m *Metrics) fellBack(route, step, reason string) {
	if m != nil {
		m.fallbacks.WithLabelValues(route, step, reason).Inc()
	}
}
