package upstream

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// Metrics are the upstreams' Prometheus metrics. One Metrics serves every
// upstream of a process (WithMetrics); the HTTP proxy and the Go client
// register the same names.
type Metrics struct {
	states *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		states: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_endpoint_state_changes_total",
			Help: "Endpoint state changes made by health checking, by upstream, endpoint and the state entered.",
		}, []string{"upstream", "endpoint", "state"}),
	}
	reg.MustRegister(m.states)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// upstreams and endpoints that are gone.
func (m *Metrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.states.MetricVec}
}

func (m *Metrics) stateChanged(upstream, addr string, st endpoint.State) {
	if m != nil {
		m.states.WithLabelValues(upstream, addr, st.String()).Inc()
	}
}
