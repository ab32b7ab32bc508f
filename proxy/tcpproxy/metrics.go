package tcpproxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/internal/seriesref"
	"github.com/switchboard-dev/switchboard/internal/shardhist"
)

// The reasons a connection is closed before (or instead of) being
// forwarded: the reason label of switchboard_tcp_rejected_total.
const (
	RejectLimit         = "limit"          // listener at max_conns, no queue or queue full
	RejectQueueTimeout  = "queue_timeout"  // waited queue_timeout in the queue
	RejectSNI           = "sni"            // no ClientHello in time, not TLS, or no route for its name
	RejectProxyProtocol = "proxy_protocol" // trusted source sent no valid PROXY header in time
	RejectNoUpstream    = "no_upstream"    // the routed upstream does not exist
	RejectNoEndpoint    = "no_endpoint"    // the upstream has no endpoint that can take traffic
	RejectEndpointLimit = "endpoint_limit" // every endpoint at max_conns_per_endpoint
	RejectConnect       = "connect_failed" // every connect attempt failed
	RejectShutdown      = "shutdown"       // the listener shut down while the connection waited
)

var rejectReasons = [...]string{
	RejectLimit, RejectQueueTimeout, RejectSNI, RejectProxyProtocol, RejectNoUpstream,
	RejectNoEndpoint, RejectEndpointLimit, RejectConnect, RejectShutdown,
}

// Why a forwarded connection ended: the cause label of
// switchboard_tcp_connections_closed_total.
const (
	CloseDone     = "done"         // both sides closed their direction
	CloseIdle     = "idle_timeout" // no byte either way for idle_timeout
	CloseError    = "error"        // a read or write failed (reset, broken pipe)
	CloseShutdown = "shutdown"     // cut at the shutdown deadline
)

var closeCauses = [...]string{CloseDone, CloseIdle, CloseError, CloseShutdown}

// The direction label of switchboard_tcp_received_bytes_total.
const (
	DirDownstreamRx = "downstream_rx" // bytes received from clients
	DirUpstreamRx   = "upstream_rx"   // bytes received from endpoints
)

// Metrics are the TCP data plane's Prometheus metrics, shared by all
// listeners. Series are resolved once per listener and per endpoint and
// cached, so a connection costs atomic adds, not label lookups, and bytes
// are counted per connection (and per activity check), never per read.
// The series every connection moves (accepted, closed, active, total,
// bytes, the connect histogram) keep per-CPU shards (internal/shardhist),
// so that the event loops, one per CPU, do not pass their cache lines back
// and forth.
type Metrics struct {
	accepted     *shardhist.CounterVec
	rejected     *prometheus.CounterVec
	queued       *prometheus.GaugeVec
	closed       *shardhist.CounterVec
	active       *shardhist.GaugeVec
	total        *shardhist.CounterVec
	bytes        *shardhist.CounterVec
	connectErrs  *prometheus.CounterVec
	connectDelay *shardhist.HistogramVec

	refs *seriesref.Refs[seriesKey]
}

// Series are reference-counted (internal/seriesref): a Listener holds its
// listener's series from NewListener until its Shutdown has finished, and
// each entry of its endpoint table holds that endpoint's until the table
// prunes it (idle since the previous prune) or the listener finishes. A
// series whose last holder let go is deleted after seriesGrace unless a
// holder takes it back first: scrapes see its last value, a listener
// replaced under the same name (new address, the old one draining) shares
// the series instead of losing them when the old one ends, and endpoints
// that come and go with discovery do not stay in /metrics for ever.
const seriesGrace = 2 * time.Minute

type seriesKey struct {
	kind                     uint8
	listener, upstream, addr string
}

const (
	keyListener     uint8 = iota // the listener's own series
	keyEndpoint                  // (listener, upstream, endpoint) series
	keyConnectDelay              // (listener, upstream): the connect histogram
)

// deleteSeries deletes the series k names (seriesref calls it).
func (m *Metrics) deleteSeries(k seriesKey) {
	switch k.kind {
	case keyListener:
		m.accepted.DeleteLabelValues(k.listener)
		m.queued.DeleteLabelValues(k.listener)
		for _, reason := range rejectReasons {
			m.rejected.DeleteLabelValues(k.listener, reason)
		}
		for _, cause := range closeCauses {
			m.closed.DeleteLabelValues(k.listener, cause)
		}
	case keyEndpoint:
		m.active.DeleteLabelValues(k.listener, k.upstream, k.addr)
		m.total.DeleteLabelValues(k.listener, k.upstream, k.addr)
		m.connectErrs.DeleteLabelValues(k.listener, k.upstream, k.addr)
		m.bytes.DeleteLabelValues(k.listener, k.upstream, k.addr, DirDownstreamRx)
		m.bytes.DeleteLabelValues(k.listener, k.upstream, k.addr, DirUpstreamRx)
	case keyConnectDelay:
		m.connectDelay.DeleteLabelValues(k.listener, k.upstream)
	}
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	ep := []string{"listener", "upstream", "endpoint"}
	m := &Metrics{
		accepted: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_accepted_total",
			Help: "TCP connections accepted, by listener.",
		}, []string{"listener"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_rejected_total",
			Help: "TCP connections closed without being forwarded, by listener and reason (limit, queue_timeout, sni, proxy_protocol, no_upstream, no_endpoint, endpoint_limit, connect_failed, shutdown).",
		}, []string{"listener", "reason"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_tcp_queued_connections",
			Help: "TCP connections waiting in the listener's queue for a free slot.",
		}, []string{"listener"}),
		closed: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_connections_closed_total",
			Help: "Forwarded TCP connections that ended, by listener and cause (done, idle_timeout, error, shutdown).",
		}, []string{"listener", "cause"}),
		active: shardhist.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_tcp_connections_active",
			Help: "TCP connections being forwarded, by listener, upstream and endpoint.",
		}, ep),
		total: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_connections_total",
			Help: "TCP connections forwarded (connected to an endpoint), by listener, upstream and endpoint.",
		}, ep),
		bytes: shardhist.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_received_bytes_total",
			Help: "Bytes received on forwarded TCP connections, by listener, upstream, endpoint and direction (downstream_rx: from clients, upstream_rx: from endpoints).",
		}, append(ep, "direction")),
		connectErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tcp_connect_errors_total",
			Help: "Failed connection attempts to endpoints (refused, unreachable, timed out), by listener, upstream and endpoint.",
		}, ep),
		connectDelay: shardhist.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_tcp_connect_duration_seconds",
			Help:    "Time to connect to an endpoint, successful attempts only, by listener and upstream.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"listener", "upstream"}),
	}
	reg.MustRegister(m.accepted, m.rejected, m.queued, m.closed, m.active, m.total, m.bytes, m.connectErrs, m.connectDelay)
	m.refs = seriesref.New(seriesGrace, m.deleteSeries)
	return m
}

// listenerMetrics are one listener's series, resolved once.
type listenerMetrics struct {
	accepted *shardhist.Counter
	queued   prometheus.Gauge
	rejected map[string]prometheus.Counter
	closed   map[string]*shardhist.Counter
}

// forListener holds and returns a listener's series; releaseListener
// lets them go.
func (m *Metrics) forListener(name string) *listenerMetrics {
	m.refs.Hold(seriesKey{kind: keyListener, listener: name})
	lm := &listenerMetrics{
		accepted: m.accepted.WithLabelValues(name),
		queued:   m.queued.WithLabelValues(name),
		rejected: make(map[string]prometheus.Counter, len(rejectReasons)),
		closed:   make(map[string]*shardhist.Counter, len(closeCauses)),
	}
	for _, r := range rejectReasons {
		lm.rejected[r] = m.rejected.WithLabelValues(name, r)
	}
	for _, c := range closeCauses {
		lm.closed[c] = m.closed.WithLabelValues(name, c)
	}
	return lm
}

func (m *Metrics) releaseListener(name string) {
	m.refs.Release(seriesKey{kind: keyListener, listener: name})
}

// endpointMetrics are one (listener, upstream, endpoint) triple's series.
type endpointMetrics struct {
	active       *shardhist.Gauge
	total        *shardhist.Counter
	rxDown, rxUp *shardhist.Counter
	connectErrs  prometheus.Counter
	connectDelay prometheus.Observer
}

// forEndpoint holds and returns an endpoint's series; releaseEndpoint lets
// them go.
func (m *Metrics) forEndpoint(listener, upstream, addr string) endpointMetrics {
	m.refs.Hold(seriesKey{keyEndpoint, listener, upstream, addr}, seriesKey{kind: keyConnectDelay, listener: listener, upstream: upstream})
	return endpointMetrics{
		active:       m.active.WithLabelValues(listener, upstream, addr),
		total:        m.total.WithLabelValues(listener, upstream, addr),
		rxDown:       m.bytes.WithLabelValues(listener, upstream, addr, DirDownstreamRx),
		rxUp:         m.bytes.WithLabelValues(listener, upstream, addr, DirUpstreamRx),
		connectErrs:  m.connectErrs.WithLabelValues(listener, upstream, addr),
		connectDelay: m.connectDelay.WithLabelValues(listener, upstream),
	}
}

func (m *Metrics) releaseEndpoint(listener, upstream, addr string) {
	m.refs.Release(seriesKey{keyEndpoint, listener, upstream, addr}, seriesKey{kind: keyConnectDelay, listener: listener, upstream: upstream})
}
