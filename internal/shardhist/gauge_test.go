package shardhist

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestGaugeExpositionMatchesClientGolang: the same steps into a sharded
// gauge and into client_golang's give the same served /metrics, series
// for series (values that went up and down across shards included).
func TestGaugeExpositionMatchesClientGolang(t *testing.T) {
	opts := prometheus.GaugeOpts{Name: "test_in_flight", Help: "Things in flight, by side.", ConstLabels: prometheus.Labels{"proxy": "p"}}
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	sv := newTestGaugeVec(opts, 4)
	cv := prometheus.NewGaugeVec(opts, []string{"side"})
	ours.MustRegister(sv)
	theirs.MustRegister(cv)
	steps := map[string][]int64{"a": {1, 1, 1, -1, 5, -2}, "b": {1, -1}, "c": {-3}}
	for side, ds := range steps {
		g, c := sv.WithLabelValues(side), cv.WithLabelValues(side)
		for i, d := range ds {
			// Spread over the shards, as steps from several CPUs are.
			g.AddAt(i%4, d)
			c.Add(float64(d))
		}
	}
	sv.WithLabelValues("never") // made, never moved
	cv.WithLabelValues("never")
	if got, want := scrape(t, ours), scrape(t, theirs); got != want {
		t.Fatalf("sharded gauge exposition:\n%s\nclient_golang's:\n%s", got, want)
	}
}

// newTestGaugeVec is NewGaugeVec with a given number of shards.
func newTestGaugeVec(opts prometheus.GaugeOpts, shards int) *GaugeVec {
	desc := prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, []string{"side"}, opts.ConstLabels)
	return &GaugeVec{name: opts.Name, MetricVec: prometheus.NewMetricVec(desc, func(lvs ...string) prometheus.Metric {
		return newGauge(desc, shards, prometheus.MakeLabelPairs(desc, lvs))
	})}
}

// TestConcurrentGaugeStepsNetExactly: goroutines on every CPU adding and
// taking leave the exact net value, and a series deleted is gone.
func TestConcurrentGaugeStepsNetExactly(t *testing.T) {
	v := NewGaugeVec(prometheus.GaugeOpts{Name: "test_flight", Help: "h"}, []string{"side"})
	g := v.WithLabelValues("x")
	const workers, n = 8, 20000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				g.Inc()
				if i%2 == 0 || w == 0 {
					g.Dec()
				}
			}
		})
	}
	wg.Wait()
	// Worker 0 took back every one; the others every other one.
	if got, want := g.Value(), int64((workers-1)*n/2); got != want {
		t.Fatalf("gauge after concurrent steps = %d, want %d", got, want)
	}
	if !v.DeleteLabelValues("x") {
		t.Fatal("DeleteLabelValues found no series")
	}
	if got := v.WithLabelValues("x").Value(); got != 0 {
		t.Fatalf("a deleted series made again = %d, want 0", got)
	}
}

func TestGaugeStepsDoNotAllocate(t *testing.T) {
	g := NewGaugeVec(prometheus.GaugeOpts{Name: "test_alloc", Help: "h"}, nil).WithLabelValues()
	if n := testing.AllocsPerRun(1000, func() { g.Inc(); g.Dec() }); n != 0 {
		t.Fatalf("Inc and Dec: %v allocations, want 0", n)
	}
}

// BenchmarkGaugeIncDecParallel: an Inc and a Dec per op from every P at
// once, as the event loops move the in-flight gauge; peer client_golang's.
func BenchmarkGaugeIncDecParallel(b *testing.B) {
	opts := prometheus.GaugeOpts{Name: "bench_in_flight", Help: "h"}
	b.Run("client_golang", func(b *testing.B) {
		g := prometheus.NewGauge(opts)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Inc()
				g.Dec()
			}
		})
	})
	b.Run("shardhist", func(b *testing.B) {
		g := NewGaugeVec(opts, nil).WithLabelValues()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Inc()
				g.Dec()
			}
		})
	})
}
