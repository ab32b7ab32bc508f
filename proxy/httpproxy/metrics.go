package httpproxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
)

// Metrics are the HTTP front end's Prometheus metrics: requests answered,
// their duration and those in flight, by listener, route, upstream and
// status code — the same series the Go client's calls count in (package
// client, under listener "client"). Per-request series are resolved once
// per route and status code and cached, so a request costs atomic adds.
type Metrics = httpmetrics.Metrics

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return httpmetrics.New(reg) }
