package admin

import "github.com/prometheus/client_golang/prometheus"

// endpointCollector reads endpoint state at scrape time, so the request
// path pays nothing for these series.
type endpointCollector struct {
	ups                                          func() []Upstream
	healthy, inflight, requests, failures, conns *prometheus.Desc
}

// NewEndpointCollector returns a collector of per-endpoint series for the
// upstreams ups returns.
func NewEndpointCollector(ups func() []Upstream) prometheus.Collector {
	l := []string{"upstream", "endpoint"}
	return &endpointCollector{
		ups:      ups,
		healthy:  prometheus.NewDesc("switchboard_endpoint_healthy", "1 if the endpoint can take traffic, else 0.", append(l, "state"), nil),
		inflight: prometheus.NewDesc("switchboard_endpoint_in_flight", "Requests in flight to the endpoint.", l, nil),
		requests: prometheus.NewDesc("switchboard_endpoint_requests_total", "Requests finished by the endpoint.", l, nil),
		failures: prometheus.NewDesc("switchboard_endpoint_failures_total", "Requests to the endpoint that failed at the transport level.", l, nil),
		conns:    prometheus.NewDesc("switchboard_upstream_connections", "Upstream connections to the endpoint, by state (open includes idle).", append(l, "state"), nil),
	}
}

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.inflight
	ch <- c.requests
	ch <- c.failures
	ch <- c.conns
}

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.ups() {
		conns := u.ConnStats()
		for _, ep := range u.Pool().Snapshot().All {
			name, addr := u.Name(), ep.Address()
			st := ep.State()
			h := 0.0
			if st.Serving() {
				h = 1
			}
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, h, name, addr, st.String())
			ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(ep.InFlight()), name, addr)
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(ep.Requests()), name, addr)
			ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ep.Failures()), name, addr)
			if conns != nil {
				cs := conns[addr]
				ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(cs[0]), name, addr, "open")
				ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(cs[1]), name, addr, "idle")
			}
		}
	}
}
