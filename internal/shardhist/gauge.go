package shardhist

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-dev/switchboard/internal/pshard"
)

// GaugeVec is a gauge vector for a count that goroutines on several CPUs
// move up and down at once, such as the requests in flight that every
// event loop adds one to when a request begins and takes one from when it
// ends: each child keeps its count in shards, as a HistogramVec's series
// does, chosen the same way (the P's token), and a scrape sums them.
// client_golang's gauge keeps one float and adds to it with a
// compare-and-swap loop, which two loops fight over (1.2% of the proxy's
// CPU under load, the largest shared update left after the histograms).
//
// Only whole steps are supported (Inc, Dec, Add): a Set over shards could
// not be atomic. Like HistogramVec it is built on prometheus.MetricVec,
// and its exposition is client_golang's gauge's.
type GaugeVec struct {
	*prometheus.MetricVec
	name string
}

// NewGaugeVec returns a gauge vector of opts' name, help and constant
// labels, with labelNames.
func NewGaugeVec(opts prometheus.GaugeOpts, labelNames []string) *GaugeVec {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	desc := prometheus.NewDesc(name, opts.Help, labelNames, opts.ConstLabels)
	return &GaugeVec{name: name, MetricVec: prometheus.NewMetricVec(desc, func(lvs ...string) prometheus.Metric {
		return newGauge(desc, shardsFor(runtime.GOMAXPROCS(0)), prometheus.MakeLabelPairs(desc, lvs))
	})}
}

// GetMetricWithLabelValues returns the child for lvs, made on first use.
func (v *GaugeVec) GetMetricWithLabelValues(lvs ...string) (*Gauge, error) {
	m, err := v.MetricVec.GetMetricWithLabelValues(lvs...)
	if err != nil {
		return nil, fmt.Errorf("shardhist: gauge %q: %w", v.name, err)
	}
	return m.(*Gauge), nil
}

// WithLabelValues is GetMetricWithLabelValues that panics on an error.
func (v *GaugeVec) WithLabelValues(lvs ...string) *Gauge {
	g, err := v.GetMetricWithLabelValues(lvs...)
	if err != nil {
		panic(err)
	}
	return g
}

// Gauge is one series of a GaugeVec. Its shards are cache-line sized
// words; the value is their sum (an Inc on one CPU and the Dec on another
// leave two shards at +1 and -1, which add up to 0).
type Gauge struct {
	desc       *prometheus.Desc
	labelPairs []*dto.LabelPair
	words      []uint64 // one per shard, stride apart (two's complement: a sum of steps)
	stride     int
	mask       uint32
}

func newGauge(desc *prometheus.Desc, shards int, labelPairs []*dto.LabelPair) *Gauge {
	words, stride := shardWords(shards, 1)
	return &Gauge{desc: desc, labelPairs: labelPairs, words: words, stride: stride, mask: uint32(shards - 1)}
}

// Add adds n (negative: takes) to the gauge, on the shard of the P the
// caller runs on.
func (g *Gauge) Add(n int64) {
	t := pshard.Get()
	atomic.AddUint64(&g.words[int(t.Load()&g.mask)*g.stride], uint64(n))
	pshard.Put(t)
}

// Inc adds one.
func (g *Gauge) Inc() { g.Add(1) }

// Dec takes one.
func (g *Gauge) Dec() { g.Add(-1) }

// Value is the sum of the shards.
func (g *Gauge) Value() int64 {
	var v uint64
	for off := 0; off < len(g.words); off += g.stride {
		v += atomic.LoadUint64(&g.words[off])
	}
	return int64(v)
}

// Desc implements prometheus.Metric.
func (g *Gauge) Desc() *prometheus.Desc { return g.desc }

// Write implements prometheus.Metric: the gauge client_golang exposes.
func (g *Gauge) Write(out *dto.Metric) error {
	out.Label = g.labelPairs
	out.Gauge = &dto.Gauge{Value: new(float64(g.Value()))}
	return nil
}
