package admin

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// endpointStates are every state an endpoint can be in, in the order of
// endpoint.State: switchboard_endpoint_state has a series for each.
var endpointStates = func() []string {
	var out []string
	for s := endpoint.Healthy; s <= endpoint.BreakerOpen; s++ {
		out = append(out, s.String())
	}
	return out
}()

// endpointCollector reads endpoint state at scrape time, so the request
// path pays nothing for these series.
type endpointCollector struct {
	ups                                                 func() []Upstream
	healthy, state, inflight, requests, failures, conns *prometheus.Desc
}

// NewEndpointCollector returns a collector of per-endpoint series for the
// upstreams ups returns. Every series keeps its identity whatever the
// endpoint's state: switchboard_endpoint_healthy is 1 or 0, and
// switchboard_endpoint_state has one series per possible state, 1 for the
// current one and 0 for the others (kube-state-metrics' convention for an
// enum), so that a state change is a change of values, never of series.
// switchboard_upstream_connections splits the connections into disjoint
// states, active (carrying an exchange) and idle (kept for reuse), which
// add up to the open connections.
func NewEndpointCollector(ups func() []Upstream) prometheus.Collector {
	l := []string{"upstream", "endpoint"}
	return &endpointCollector{
		ups:      ups,
		healthy:  prometheus.NewDesc("switchboard_endpoint_healthy", "1 if the endpoint can take traffic, else 0.", l, nil),
		state:    prometheus.NewDesc("switchboard_endpoint_state", "The endpoint's state: 1 for the state it is in, 0 for every other.", append(l, "state"), nil),
		inflight: prometheus.NewDesc("switchboard_endpoint_in_flight", "Requests in flight to the endpoint.", l, nil),
		requests: prometheus.NewDesc("switchboard_endpoint_requests_total", "Requests finished by the endpoint.", l, nil),
		failures: prometheus.NewDesc("switchboard_endpoint_failures_total", "Requests to the endpoint that failed at the transport level.", l, nil),
		conns:    prometheus.NewDesc("switchboard_upstream_connections", "Upstream connections to the endpoint, by state: active (carrying an exchange) or idle (kept for reuse); the two add up to the open connections.", append(l, "state"), nil),
	}
}

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.state
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
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, bool01(st.Serving()), name, addr)
			for i, s := range endpointStates {
				ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, bool01(int(st) == i), name, addr, s)
			}
			ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(ep.InFlight()), name, addr)
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(ep.Requests()), name, addr)
			ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ep.Failures()), name, addr)
			if conns != nil {
				cs := conns[addr]
				open, idle := cs[0], cs[1]
				// The two counts are read apart: a connection going idle
				// between the reads must not make active negative.
				active := max(open-idle, 0)
				ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(active), name, addr, "active")
				ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(idle), name, addr, "idle")
			}
		}
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewBuildInfoCollector returns the collector of switchboard_build_info, a
// gauge of 1 whose labels say which build is running: the main module's
// version, the VCS revision it was built from ("unknown" when the build
// recorded none, as for go run or a test binary), and the Go version. It
// is read once: a binary's build does not change while it runs.
func NewBuildInfoCollector() prometheus.Collector {
	version, revision, goVersion := "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "switchboard_build_info",
		Help:        "1, labelled with the running build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return g
}
