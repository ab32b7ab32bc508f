package shardhist

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestCounterExpositionMatchesClientGolang: the same counts into a
// sharded counter and into client_golang's give the same served /metrics,
// series for series (counts spread over the shards, a series never
// counted, a large amount).
func TestCounterExpositionMatchesClientGolang(t *testing.T) {
	opts := prometheus.CounterOpts{Name: "test_requests_total", Help: "Requests, by code.", ConstLabels: prometheus.Labels{"proxy": "p"}}
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	sv := newTestCounterVec(opts, 4)
	cv := prometheus.NewCounterVec(opts, []string{"code"})
	ours.MustRegister(sv)
	theirs.MustRegister(cv)
	counts := map[string][]uint64{"200": {1, 1, 1, 7, 1 << 40}, "404": {1}, "500": {3, 0}}
	for code, ns := range counts {
		c, cc := sv.WithLabelValues(code), cv.WithLabelValues(code)
		for i, n := range ns {
			// Spread over the shards, as counts from several CPUs are.
			c.AddAt(i%4, int64(n))
			cc.Add(float64(n))
		}
	}
	sv.WithLabelValues("204") // made, never counted
	cv.WithLabelValues("204")
	if got, want := scrape(t, ours), scrape(t, theirs); got != want {
		t.Fatalf("sharded counter exposition:\n%s\nclient_golang's:\n%s", got, want)
	}
	var m dto.Metric
	if err := sv.WithLabelValues("200").Write(&m); err != nil || m.Counter.GetCreatedTimestamp() == nil {
		t.Fatalf("Write: %v, created timestamp %v; want one, as client_golang's counter has", err, m.Counter.GetCreatedTimestamp())
	}
}

// newTestCounterVec is NewCounterVec with a given number of shards.
func newTestCounterVec(opts prometheus.CounterOpts, shards int) *CounterVec {
	desc := prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, []string{"code"}, opts.ConstLabels)
	return &CounterVec{name: opts.Name, MetricVec: prometheus.NewMetricVec(desc, func(lvs ...string) prometheus.Metric {
		return newCounter(desc, shards, prometheus.MakeLabelPairs(desc, lvs))
	})}
}

// TestConcurrentCountsAddUpExactly: goroutines on every CPU counting at
// once leave the exact total, and a series deleted is gone.
func TestConcurrentCountsAddUpExactly(t *testing.T) {
	v := NewCounterVec(prometheus.CounterOpts{Name: "test_count_total", Help: "h"}, []string{"code"})
	c := v.WithLabelValues("200")
	const workers, n = 8, 20000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range n {
				c.Inc()
				c.Add(uint64(w))
			}
		})
	}
	wg.Wait()
	// Each worker w added n x (1 + w).
	if got, want := c.Value(), uint64(n*workers+n*workers*(workers-1)/2); got != want {
		t.Fatalf("counter after concurrent counts = %d, want %d", got, want)
	}
	if !v.DeleteLabelValues("200") {
		t.Fatal("DeleteLabelValues found no series")
	}
	if got := v.WithLabelValues("200").Value(); got != 0 {
		t.Fatalf("a deleted series made again = %d, want 0", got)
	}
}

func TestCountsDoNotAllocate(t *testing.T) {
	c := NewCounterVec(prometheus.CounterOpts{Name: "test_alloc_total", Help: "h"}, nil).WithLabelValues()
	if n := testing.AllocsPerRun(1000, func() { c.Inc(); c.Add(3) }); n != 0 {
		t.Fatalf("Inc and Add: %v allocations, want 0", n)
	}
}

// BenchmarkCounterIncParallel: an Inc per op from every P at once, as the
// event loops count requests; peer client_golang's.
func BenchmarkCounterIncParallel(b *testing.B) {
	opts := prometheus.CounterOpts{Name: "bench_requests_total", Help: "h"}
	b.Run("client_golang", func(b *testing.B) {
		c := prometheus.NewCounter(opts)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
	})
	b.Run("shardhist", func(b *testing.B) {
		c := NewCounterVec(opts, nil).WithLabelValues()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Inc()
			}
		})
	})
}
