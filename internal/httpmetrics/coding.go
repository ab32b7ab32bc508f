package httpmetrics

import "github.com/prometheus/client_golang/prometheus"

// codingVecs are the response-coding counters: what a route's compression
// (mode "compress") and decompression (mode "decompress") took in and gave
// out, by algorithm (gzip, zstd). Their ratio is the compression ratio.
type codingVecs struct {
	responses, in, out *prometheus.CounterVec
}

func newCodingVecs() codingVecs {
	labels := []string{"listener", "route", "upstream", "algorithm", "mode"}
	return codingVecs{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_compression_responses_total",
			Help: "Responses compressed (mode compress) or decompressed (mode decompress) by the proxy, by route and algorithm.",
		}, labels),
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_compression_in_bytes_total",
			Help: "Response body bytes taken in by compression (identity bytes) or decompression (encoded bytes), by route and algorithm.",
		}, labels),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_compression_out_bytes_total",
			Help: "Response body bytes given out by compression (encoded bytes) or decompression (identity bytes), by route and algorithm.",
		}, labels),
	}
}

func (c codingVecs) vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{c.responses.MetricVec, c.in.MetricVec, c.out.MetricVec}
}

// Coding is the series of one route's compression or decompression with
// one algorithm. A nil *Coding counts nothing.
type Coding struct {
	responses, in, out prometheus.Counter
}

// Coding returns the series of route (of listener, over upstream) coding
// with algorithm in mode ("compress" or "decompress"). Resolve it once,
// when the route is built. A nil *Metrics gives a nil *Coding.
func (m *Metrics) Coding(listener, route, upstream, algorithm, mode string) *Coding {
	if m == nil {
		return nil
	}
	return &Coding{
		responses: m.coding.responses.WithLabelValues(listener, route, upstream, algorithm, mode),
		in:        m.coding.in.WithLabelValues(listener, route, upstream, algorithm, mode),
		out:       m.coding.out.WithLabelValues(listener, route, upstream, algorithm, mode),
	}
}

// Count counts one response coded: in bytes taken in, out given out.
func (c *Coding) Count(in, out int64) {
	if c == nil {
		return
	}
	c.responses.Inc()
	c.in.Add(float64(in))
	c.out.Add(float64(out))
}
