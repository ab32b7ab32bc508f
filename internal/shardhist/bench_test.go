package shardhist

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// benchValues returns 4096 latencies, log-uniform from lo to hi seconds.
func benchValues(lo, hi float64) []float64 {
	r := rand.New(rand.NewPCG(1, 2))
	vs := make([]float64, 4096)
	for i := range vs {
		vs[i] = lo * math.Pow(hi/lo, r.Float64())
	}
	return vs
}

// spread are latencies over the whole range of latencyBuckets, whose
// buckets a branch predictor cannot guess; local are those of a proxy in
// front of backends on the same machine (0.1-1 ms: the first buckets).
var (
	spread = benchValues(0.0002, 20)
	local  = benchValues(0.0001, 0.001)
)

// randomShard is a series that picks a random shard per observation
// (math/rand/v2's per-thread generator) instead of its P's: the
// alternative the tokens were measured against.
type randomShard struct{ h *histogram }

func (r randomShard) Observe(v float64) {
	var t atomic.Uint32
	t.Store(rand.Uint32())
	r.h.observeIn(&t, v)
}

// peers are the histograms compared, one series each with switchboard's
// latency buckets: client_golang's, ours, and ours with random shards.
func peers() []struct {
	name string
	o    prometheus.Observer
} {
	opts := prometheus.HistogramOpts{Name: "b_seconds", Help: "b.", Buckets: latencyBuckets}
	return []struct {
		name string
		o    prometheus.Observer
	}{
		{"client_golang", prometheus.NewHistogramVec(opts, []string{"route"}).WithLabelValues("r")},
		{"shardhist", NewHistogramVec(opts, []string{"route"}).WithLabelValues("r")},
		{"random-shard", randomShard{NewHistogramVec(opts, []string{"route"}).WithLabelValues("r").(*histogram)}},
	}
}

// BenchmarkObserve is one goroutine observing: what an observation costs
// when its cache lines stay put.
func BenchmarkObserve(b *testing.B) {
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				p.o.Observe(spread[i&4095])
				i++
			}
		})
	}
}

// BenchmarkObserveParallel is GOMAXPROCS goroutines observing into one
// series flat out, as the event loops (one per CPU) do into a busy
// route's, at their worst.
func BenchmarkObserveParallel(b *testing.B) {
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(4096)
				for pb.Next() {
					p.o.Observe(spread[i&4095])
					i++
				}
			})
		})
	}
}

// BenchmarkObserveBetweenWork is GOMAXPROCS goroutines that each do about
// a microsecond of work of their own (on memory of their own) and then
// three observations, as a request does: what an observation costs when a
// shard's lines may have gone to another CPU since. Its peer "none"
// observes nothing: the others' ns/op less its are what three
// observations cost (per CPU: times GOMAXPROCS).
func BenchmarkObserveBetweenWork(b *testing.B) {
	all := append(peers(), struct {
		name string
		o    prometheus.Observer
	}{"none", nopObserver{}})
	for _, p := range all {
		b.Run(p.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				var own [64]uint64
				i := rand.IntN(4096)
				for pb.Next() {
					work(&own, 1000)
					p.o.Observe(spread[i&4095])
					p.o.Observe(spread[(i+7)&4095])
					p.o.Observe(spread[(i+13)&4095])
					i++
				}
			})
		})
	}
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}

// work does n steps of a generator into own.
func work(own *[64]uint64, n int) {
	x := own[0]
	for i := range n {
		x = x*6364136223846793005 + 1442695040888963407
		own[i&63] ^= x
	}
	own[0] = x
}

// BenchmarkFindBucket compares the bucket searches for switchboard's 15
// latency buckets: a linear scan that stops at the bucket (what
// findBucket does, and client_golang below 35 buckets), a scan of all
// bounds that counts those below (no branch to mispredict), and
// sort.SearchFloat64s's binary search.
func BenchmarkFindBucket(b *testing.B) {
	searches := []struct {
		name string
		f    func([]float64, float64) int
	}{
		{"linear", findBucket},
		{"count", countBelow},
		{"binary", binarySearch},
	}
	for _, vs := range []struct {
		name string
		vs   []float64
	}{{"spread", spread}, {"local", local}} {
		for _, s := range searches {
			b.Run(vs.name+"/"+s.name, func(b *testing.B) {
				i, sum := 0, 0
				for b.Loop() {
					sum += s.f(latencyBuckets, vs.vs[i&4095])
					i++
				}
				sink = sum
			})
		}
	}
}

var sink int

func countBelow(bounds []float64, v float64) int {
	n := 0
	for _, b := range bounds {
		if !(v <= b) {
			n++
		}
	}
	return n
}

func binarySearch(bounds []float64, v float64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !(v <= bounds[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// TestSearchesAgree checks that the searches BenchmarkFindBucket compares
// give the same buckets.
func TestSearchesAgree(t *testing.T) {
	vs := append(append(append([]float64{math.NaN(), math.Inf(1), math.Inf(-1)}, boundaryValues()...), spread...), local...)
	for _, v := range vs {
		want := findBucket(latencyBuckets, v)
		if got := countBelow(latencyBuckets, v); got != want {
			t.Errorf("countBelow(%v) = %d, findBucket says %d", v, got, want)
		}
		if got := binarySearch(latencyBuckets, v); got != want {
			t.Errorf("binarySearch(%v) = %d, findBucket says %d", v, got, want)
		}
	}
}
