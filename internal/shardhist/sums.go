package shardhist

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	name, mv := newSumVec(prometheus.Opts(opts), labelNames, func(desc *prometheus.Desc, shards int, lps []*dto.LabelPair) prometheus.Metric {
		return newGauge(desc, shards, lps)
	})
	return &GaugeVec{name: name, MetricVec: mv}
}

// newSumVec is the MetricVec of a GaugeVec or CounterVec of opts, whose
// children mk makes with shardsFor's count of shards.
func newSumVec(opts prometheus.Opts, labelNames []string, mk func(*prometheus.Desc, int, []*dto.LabelPair) prometheus.Metric) (string, *prometheus.MetricVec) {
	name := prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name)
	desc := prometheus.NewDesc(name, opts.Help, labelNames, opts.ConstLabels)
	return name, prometheus.NewMetricVec(desc, func(lvs ...string) prometheus.Metric {
		return mk(desc, shardsFor(runtime.GOMAXPROCS(0)), prometheus.MakeLabelPairs(desc, lvs))
	})
}

// GetMetricWithLabelValues returns the child for lvs, made on first use.
func (v *GaugeVec) GetMetricWithLabelValues(lvs ...string) (*Gauge, error) {
	return child[*Gauge](v.MetricVec, "gauge", v.name, lvs)
}

// WithLabelValues is GetMetricWithLabelValues that panics on an error.
func (v *GaugeVec) WithLabelValues(lvs ...string) *Gauge {
	return must(v.GetMetricWithLabelValues(lvs...))
}

// sum is a whole count kept in shards (a pshard.Int), with the series'
// description and labels: what a Gauge and a Counter are. Steps on one
// CPU and the other land in different shards (an Inc on one and the Dec
// on the other leave +1 and -1, which add up to 0).
type sum struct {
	desc       *prometheus.Desc
	labelPairs []*dto.LabelPair
	pshard.Int
}

func newSum(desc *prometheus.Desc, shards int, labelPairs []*dto.LabelPair) sum {
	return sum{desc: desc, labelPairs: labelPairs, Int: pshard.NewInt(shards)}
}

// Desc implements prometheus.Metric.
func (s *sum) Desc() *prometheus.Desc { return s.desc }

// Gauge is one series of a GaugeVec.
type Gauge struct{ sum }

func newGauge(desc *prometheus.Desc, shards int, labelPairs []*dto.LabelPair) *Gauge {
	return &Gauge{newSum(desc, shards, labelPairs)}
}

// Add adds n (negative: takes) to the gauge, on the shard of the P the
// caller runs on.
func (g *Gauge) Add(n int64) { g.Int.Add(n) }

// Inc adds one.
func (g *Gauge) Inc() { g.Int.Add(1) }

// Dec takes one.
func (g *Gauge) Dec() { g.Add(-1) }

// Value is the sum of the shards.
func (g *Gauge) Value() int64 { return g.Load() }

// Write implements prometheus.Metric: the gauge client_golang exposes.
func (g *Gauge) Write(out *dto.Metric) error {
	out.Label = g.labelPairs
	out.Gauge = &dto.Gauge{Value: new(float64(g.Value()))}
	return nil
}

// CounterVec is a counter vector for counts that goroutines on several
// CPUs add to at once, such as the requests answered that every event loop
// counts: as a GaugeVec, each child keeps its count in shards and a scrape
// sums them. client_golang's counter adds to one word, whose cache line two
// loops pass back and forth on every request.
//
// Only whole amounts are counted (Inc, Add of a uint64). Its exposition is
// client_golang's counter's.
type CounterVec struct {
	*prometheus.MetricVec
	name string
}

// NewCounterVec returns a counter vector of opts' name, help and constant
// labels, with labelNames.
func NewCounterVec(opts prometheus.CounterOpts, labelNames []string) *CounterVec {
	name, mv := newSumVec(prometheus.Opts(opts), labelNames, func(desc *prometheus.Desc, shards int, lps []*dto.LabelPair) prometheus.Metric {
		return newCounter(desc, shards, lps)
	})
	return &CounterVec{name: name, MetricVec: mv}
}

// GetMetricWithLabelValues returns the child for lvs, made on first use.
func (v *CounterVec) GetMetricWithLabelValues(lvs ...string) (*Counter, error) {
	return child[*Counter](v.MetricVec, "counter", v.name, lvs)
}

// WithLabelValues is GetMetricWithLabelValues that panics on an error.
func (v *CounterVec) WithLabelValues(lvs ...string) *Counter {
	return must(v.GetMetricWithLabelValues(lvs...))
}

// Counter is one series of a CounterVec.
type Counter struct {
	sum
	created *timestamppb.Timestamp
}

func newCounter(desc *prometheus.Desc, shards int, labelPairs []*dto.LabelPair) *Counter {
	return &Counter{sum: newSum(desc, shards, labelPairs), created: timestamppb.Now()}
}

// Add adds n, on the shard of the P the caller runs on.
func (c *Counter) Add(n uint64) { c.Int.Add(int64(n)) }

// Inc adds one.
func (c *Counter) Inc() { c.Int.Add(1) }

// Value is the sum of the shards.
func (c *Counter) Value() uint64 { return uint64(c.Load()) }

// Write implements prometheus.Metric: the counter client_golang exposes.
func (c *Counter) Write(out *dto.Metric) error {
	out.Label = c.labelPairs
	out.Counter = &dto.Counter{Value: new(float64(c.Value())), CreatedTimestamp: c.created}
	return nil
}
