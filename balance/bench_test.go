package balance

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// benchSizes are the pool sizes every policy is measured at.
var benchSizes = []int{3, 100, 10_000}

// benchWeights returns n weights 1..5 in a repeating pattern.
func benchWeights(n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = i%5 + 1
	}
	return w
}

// BenchmarkPick measures Pick + Done for every policy at 3, 100 and 10,000
// endpoints, on one goroutine and with b.RunParallel. Hashing policies get
// a different key each pick (1024 keys in turn).
//
//	go test -run '^$' -bench Pick -benchmem ./balance/
func BenchmarkPick(b *testing.B) {
	ks := keys(1024)
	for _, policy := range builtinPolicies {
		for _, n := range benchSizes {
			eps := newEndpoints(benchWeights(n)...)
			bal, err := New(testConfig(policy))
			if err != nil {
				b.Fatal(err)
			}
			bal.Update(setOf(eps))
			o := endpoint.Outcome{Latency: time.Millisecond, Status: 200}
			b.Run(fmt.Sprintf("%s/n=%d/serial", policy, n), func(b *testing.B) {
				info := Info{HasKey: hashing(policy)}
				i := 0
				for b.Loop() {
					info.Key = ks[i&1023]
					i++
					r, err := bal.Pick(&info)
					if err != nil {
						b.Fatal(err)
					}
					r.Done(o)
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/parallel", policy, n), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					info := Info{HasKey: hashing(policy)}
					i := rand.IntN(1024)
					for pb.Next() {
						info.Key = ks[i&1023]
						i++
						r, err := bal.Pick(&info)
						if err != nil {
							panic(err)
						}
						r.Done(o)
					}
				})
			})
		}
	}
}

// BenchmarkBaseline gives reference points for BenchmarkPick: the floor
// every policy pays (the endpoint's Acquire and Release, three atomic
// adds), and round robin behind a sync.Mutex, the simplest thing that
// works.
func BenchmarkBaseline(b *testing.B) {
	eps := newEndpoints(benchWeights(100)...)
	b.Run("acquire_release/n=1/serial", func(b *testing.B) {
		ep, done := eps[0], eps[0].DoneFunc()
		for b.Loop() {
			ep.Acquire()
			done(endpoint.Outcome{})
		}
	})
	var mu sync.Mutex
	next := 0
	pick := func() Result {
		mu.Lock()
		ep := eps[next%len(eps)]
		next++
		mu.Unlock()
		ep.Acquire()
		return Result{Endpoint: ep, Done: ep.DoneFunc()}
	}
	o := endpoint.Outcome{Latency: time.Millisecond}
	b.Run("mutex_round_robin/n=100/serial", func(b *testing.B) {
		for b.Loop() {
			pick().Done(o)
		}
	})
	b.Run("mutex_round_robin/n=100/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				pick().Done(o)
			}
		})
	})
}

// BenchmarkUpdate measures rebuilding a policy's pick state for a new
// snapshot (off the pick path, but it bounds how often pools can change).
func BenchmarkUpdate(b *testing.B) {
	for _, policy := range builtinPolicies {
		for _, n := range []int{100, 10_000} {
			eps := newEndpoints(benchWeights(n)...)
			bal, _ := New(testConfig(policy))
			set := setOf(eps)
			b.Run(fmt.Sprintf("%s/n=%d", policy, n), func(b *testing.B) {
				for b.Loop() {
					bal.Update(set)
				}
			})
		}
	}
}

// cumSampler is the alternative to the alias method that BenchmarkSampler
// measures it against: a binary search over cumulative weights.
type cumSampler struct {
	cum   []float64
	total float64
}

func newCumSampler(w []float64) cumSampler {
	c := cumSampler{cum: make([]float64, len(w))}
	for i, x := range w {
		c.total += x
		c.cum[i] = c.total
	}
	return c
}

func (c *cumSampler) draw(r uint64) int {
	x := float64(r>>11) / (1 << 53) * c.total
	return sort.SearchFloat64s(c.cum, x)
}

// BenchmarkSampler chose weighted_random's algorithm (see sampler).
func BenchmarkSampler(b *testing.B) {
	var sink atomic.Int64
	for _, n := range benchSizes {
		w := make([]float64, n)
		for i := range w {
			w[i] = float64(i%5 + 1)
		}
		alias, cum := newSampler(w), newCumSampler(w)
		b.Run(fmt.Sprintf("alias/n=%d", n), func(b *testing.B) {
			s := 0
			for b.Loop() {
				s += alias.draw(rand.Uint64())
			}
			sink.Add(int64(s))
		})
		b.Run(fmt.Sprintf("binary_search/n=%d", n), func(b *testing.B) {
			s := 0
			for b.Loop() {
				s += cum.draw(rand.Uint64())
			}
			sink.Add(int64(s))
		})
	}
}

// BenchmarkDynamicWeightReport measures dynamic_weight's Pick + Done when
// every Done carries a load report (the proxy's case when backends send
// X-Switchboard-Load): cpu and mem only, and the same with two custom
// factors configured and reported.
//
//	go test -run '^$' -bench DynamicWeightReport -benchmem ./balance/
func BenchmarkDynamicWeightReport(b *testing.B) {
	for _, tc := range []struct {
		name    string
		factors map[string]DynamicFactor
		report  string
	}{
		{"cpu_mem", nil, "cpu=0.42, mem=0.31"},
		{"cpu_mem_2_factors", map[string]DynamicFactor{"queue_depth": {Coefficient: 0.3, Max: 100}, "inventory": {Coefficient: 0.2, Max: 50, Prefer: PreferHigh}},
			"cpu=0.42, mem=0.31, queue_depth=17, inventory=12"},
	} {
		cfg := testConfig(DynamicWeightName)
		cfg.DynamicWeight.Factors = tc.factors
		bal, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		bal.Update(setOf(newEndpoints(benchWeights(100)...)))
		o := endpoint.Outcome{Latency: time.Millisecond, Status: 200, LoadReport: tc.report}
		b.Run(tc.name+"/n=100/serial", func(b *testing.B) {
			b.ReportAllocs()
			var info Info
			for b.Loop() {
				r, err := bal.Pick(&info)
				if err != nil {
					b.Fatal(err)
				}
				r.Done(o)
			}
		})
	}
}

// BenchmarkConsistentHashMD5 compares consistent_hash's Pick + Done with
// hash: md5 (the Python ring's 128-bit points) against the default fnv1a,
// at 10 and 100 endpoints, with a different key each pick.
//
//	go test -run '^$' -bench ConsistentHashMD5 -benchmem ./balance/
func BenchmarkConsistentHashMD5(b *testing.B) {
	ks := keys(1024)
	for _, n := range []int{10, 100} {
		for _, hash := range []string{HashFNV1a, HashMD5} {
			bal, err := New(Config{Policy: ConsistentHashName, HashKey: "path", Hash: hash})
			if err != nil {
				b.Fatal(err)
			}
			bal.Update(setOf(newEndpoints(equalWeights(n)...)))
			o := endpoint.Outcome{Latency: time.Millisecond, Status: 200}
			b.Run(fmt.Sprintf("%s/n=%d/serial", hash, n), func(b *testing.B) {
				b.ReportAllocs()
				info := Info{HasKey: true}
				i := 0
				for b.Loop() {
					info.Key = ks[i&1023]
					i++
					r, err := bal.Pick(&info)
					if err != nil {
						b.Fatal(err)
					}
					r.Done(o)
				}
			})
		}
	}
}
