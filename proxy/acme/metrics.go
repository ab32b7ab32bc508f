package acme

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ACME managers' Prometheus series, shared by all of
// them (labels: listener, and host for the expiry). A nil *Metrics
// counts nothing.
type Metrics struct {
	expiry     *prometheus.GaugeVec
	stored     *prometheus.CounterVec
	failures   *prometheus.CounterVec
	challenges *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg:
//
//	switchboard_acme_certificate_expiry_timestamp_seconds{listener,host}
//	switchboard_acme_certificates_obtained_total{listener}
//	switchboard_acme_obtain_failures_total{listener}
//	switchboard_acme_challenges_total{listener,challenge}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_acme_certificate_expiry_timestamp_seconds",
			Help: "When the certificate an ACME listener serves for a host expires (Unix time).",
		}, []string{"listener", "host"}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_acme_certificates_obtained_total",
			Help: "Certificates obtained or renewed from the ACME CA and stored.",
		}, []string{"listener"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_acme_obtain_failures_total",
			Help: "Attempts to obtain a certificate from the ACME CA that failed (each is retried later).",
		}, []string{"listener"}),
		challenges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_acme_challenges_total",
			Help: "ACME challenge requests answered, by challenge type (tls-alpn-01, http-01).",
		}, []string{"listener", "challenge"}),
	}
	reg.MustRegister(m.expiry, m.stored, m.failures, m.challenges)
	return m
}

func (m *Metrics) setExpiry(listener, host string, t time.Time) {
	if m != nil {
		m.expiry.WithLabelValues(listener, host).Set(float64(t.Unix()))
	}
}

func (m *Metrics) obtained(listener, host string, notAfter time.Time) {
	if m != nil {
		m.stored.WithLabelValues(listener).Inc()
		m.setExpiry(listener, host, notAfter)
	}
}

func (m *Metrics) failed(listener string) {
	if m != nil {
		m.failures.WithLabelValues(listener).Inc()
	}
}

func (m *Metrics) challenge(listener, typ string) {
	if m != nil {
		m.challenges.WithLabelValues(listener, typ).Inc()
	}
}

// Forget drops the series of a listener's host that is no longer
// served.
func (m *Metrics) Forget(listener, host string) {
	if m != nil {
		m.expiry.DeleteLabelValues(listener, host)
	}
}
