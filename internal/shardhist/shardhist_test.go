package shardhist

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-dev/switchboard/internal/pshard"
)

// latencyBuckets are httpmetrics.LatencyBuckets (httpmetrics imports this
// package).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// scrape serves reg's /metrics on loopback, as the admin server does, and
// returns the body of one GET.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	return string(body)
}

// observation is a value observed into a series.
type observation struct {
	lvs []string
	v   float64
}

// boundaryValues are values on, just below and just above every bound of
// latencyBuckets, below the first and above the last, zero and negatives.
func boundaryValues() []float64 {
	vs := []float64{0, -1, -0.0001, 31, 1e9, 1e-9}
	for _, b := range latencyBuckets {
		vs = append(vs, b, math.Nextafter(b, 0), math.Nextafter(b, 100), b*1.5)
	}
	return vs
}

// dyadic returns n values that are multiples of 1/1024 (up to 40 s), whose
// sums are exact in any order and grouping.
func dyadic(n int) []float64 {
	vs := make([]float64, n)
	for i := range vs {
		vs[i] = float64((i*7919)%40960) / 1024
	}
	return vs
}

// TestExpositionMatchesClientGolang observes the same values into a
// HistogramVec and a prometheus.HistogramVec with the same options and
// compares what /metrics serves for each, line for line.
func TestExpositionMatchesClientGolang(t *testing.T) {
	two := func(vs []float64) []observation {
		var obs []observation
		for i, v := range vs {
			obs = append(obs, observation{[]string{"web", []string{"orders", "users"}[i%2]}, v})
		}
		return obs
	}
	cases := []struct {
		name   string
		opts   prometheus.HistogramOpts
		labels []string
		shards int
		obs    []observation
	}{
		{
			// One shard adds the sum in observation order, as
			// client_golang does: the sums are bit for bit the same
			// for any values.
			name: "boundaries, one shard",
			opts: prometheus.HistogramOpts{
				Name: "switchboard_http_request_duration_seconds", Help: "Time to answer.",
				Buckets: latencyBuckets,
			},
			labels: []string{"listener", "route"}, shards: 1,
			obs: two(boundaryValues()),
		},
		{
			// Many shards add sums in other groupings: values whose
			// sums are exact show the rest is the same.
			name: "exact values, sixteen shards",
			opts: prometheus.HistogramOpts{
				Namespace: "switchboard", Subsystem: "upstream", Name: "response_header_seconds",
				Help: "Time to a head.", Buckets: latencyBuckets,
				ConstLabels: prometheus.Labels{"zone": "a"},
			},
			labels: []string{"listener", "route"}, shards: 16,
			obs: two(dyadic(5000)),
		},
		{
			name: "default buckets, an explicit +Inf bucket, no labels",
			opts: prometheus.HistogramOpts{
				Name: "x_seconds", Help: "x.",
				Buckets: append(append([]float64(nil), prometheus.DefBuckets...), math.Inf(1)),
			},
			shards: 4,
			obs: func() []observation {
				var obs []observation
				for _, v := range dyadic(300) {
					obs = append(obs, observation{nil, v / 4})
				}
				return obs
			}(),
		},
		{
			name:   "NaN and infinities",
			opts:   prometheus.HistogramOpts{Name: "y_seconds", Help: "y.", Buckets: []float64{1, 2}},
			labels: []string{"k"}, shards: 2,
			obs: []observation{
				{[]string{"inf"}, math.Inf(1)}, {[]string{"inf"}, 1},
				{[]string{"neginf"}, math.Inf(-1)}, {[]string{"neginf"}, 3},
				{[]string{"nan"}, math.NaN()}, {[]string{"nan"}, 2},
			},
		},
		{
			name:   "a series made and never observed",
			opts:   prometheus.HistogramOpts{Name: "z_seconds", Help: "z.", Buckets: latencyBuckets},
			labels: []string{"k"}, shards: 8,
			obs: nil,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			theirs, ours := prometheus.NewRegistry(), prometheus.NewRegistry()
			want := prometheus.NewHistogramVec(c.opts, c.labels)
			got := newVec(c.opts, c.labels, c.shards)
			theirs.MustRegister(want)
			ours.MustRegister(got)
			if len(c.labels) > 0 {
				lvs := make([]string, len(c.labels))
				for i := range lvs {
					lvs[i] = "made"
				}
				want.WithLabelValues(lvs...)
				got.WithLabelValues(lvs...)
			}
			for _, o := range c.obs {
				want.WithLabelValues(o.lvs...).Observe(o.v)
				got.WithLabelValues(o.lvs...).Observe(o.v)
			}
			w, g := scrape(t, theirs), scrape(t, ours)
			if !strings.Contains(w, "_bucket{") {
				t.Fatalf("client_golang's exposition has no buckets:\n%s", w)
			}
			if g != w {
				t.Errorf("exposition differs from client_golang's\n--- ours:\n%s\n--- client_golang's:\n%s", g, w)
			}
		})
	}
}

// histogramOf gathers reg and returns the histogram of name with the label
// values lvs (in the order of the label names, sorted), or nil.
func histogramOf(t *testing.T, reg *prometheus.Registry, name string, lvs ...string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(lvs) {
				continue
			}
			for i, lp := range m.GetLabel() {
				if lp.GetValue() != lvs[i] {
					continue metrics
				}
			}
			return m.GetHistogram()
		}
	}
	return nil
}

// TestConcurrentObserversGiveExactCountAndSum has goroutines (more than
// CPUs) observe into one series and checks the count, the sum and every
// bucket against what was observed.
func TestConcurrentObserversGiveExactCountAndSum(t *testing.T) {
	const goroutines, each = 8, 4000
	reg := prometheus.NewRegistry()
	vec := NewHistogramVec(prometheus.HistogramOpts{Name: "c_seconds", Help: "c.", Buckets: latencyBuckets}, []string{"route"})
	reg.MustRegister(vec)
	o := vec.WithLabelValues("orders")

	vs := dyadic(each)
	var wantSum float64
	wantBuckets := make([]uint64, len(latencyBuckets))
	for _, v := range vs {
		wantSum += goroutines * v
		for i, b := range latencyBuckets {
			if v <= b {
				wantBuckets[i] += goroutines
			}
		}
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for _, v := range vs {
				o.Observe(v)
			}
		})
	}
	wg.Wait()

	h := histogramOf(t, reg, "c_seconds", "orders")
	if h == nil {
		t.Fatal("no series c_seconds{route=\"orders\"}")
	}
	if got := h.GetSampleCount(); got != goroutines*each {
		t.Errorf("count = %d, want %d", got, goroutines*each)
	}
	if got := h.GetSampleSum(); got != wantSum {
		t.Errorf("sum = %v, want %v", got, wantSum)
	}
	for i, b := range h.GetBucket() {
		if b.GetCumulativeCount() != wantBuckets[i] || b.GetUpperBound() != latencyBuckets[i] {
			t.Errorf("bucket %d = le %v: %d, want le %v: %d", i, b.GetUpperBound(), b.GetCumulativeCount(), latencyBuckets[i], wantBuckets[i])
		}
	}
}

// TestScrapesDuringObservationsAreConsistent scrapes while goroutines
// observe: in every scrape the cumulative buckets increase up to the
// count (the +Inf bucket), and no figure goes down from one scrape to the
// next.
func TestScrapesDuringObservationsAreConsistent(t *testing.T) {
	const goroutines, each = 4, 20000
	reg := prometheus.NewRegistry()
	vec := NewHistogramVec(prometheus.HistogramOpts{Name: "s_seconds", Help: "s.", Buckets: latencyBuckets}, nil)
	reg.MustRegister(vec)
	o := vec.WithLabelValues()
	vs := dyadic(each)

	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for _, v := range vs {
				o.Observe(v)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	prev := make([]uint64, len(latencyBuckets)+1)
	check := func() {
		h := histogramOf(t, reg, "s_seconds")
		cur := make([]uint64, 0, len(latencyBuckets)+1)
		for _, b := range h.GetBucket() {
			cur = append(cur, b.GetCumulativeCount())
		}
		cur = append(cur, h.GetSampleCount())
		for i := range cur {
			if i > 0 && cur[i] < cur[i-1] {
				t.Fatalf("cumulative buckets go down within a scrape: %v", cur)
			}
			if cur[i] < prev[i] {
				t.Fatalf("scrape went back: %v after %v", cur, prev)
			}
		}
		prev = cur
	}
	scrapes := 0
	for running := true; running; scrapes++ {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	if prev[len(prev)-1] != goroutines*each {
		t.Errorf("final count = %d, want %d (after %d scrapes)", prev[len(prev)-1], goroutines*each, scrapes)
	}
}

// TestDeleteRemovesSeries deletes series through the embedded MetricVec,
// as the app does for gone routes and endpoints.
func TestDeleteRemovesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := NewHistogramVec(prometheus.HistogramOpts{Name: "d_seconds", Help: "d.", Buckets: latencyBuckets}, []string{"upstream", "endpoint"})
	reg.MustRegister(vec)
	for _, lv := range [][2]string{{"app", "a:1"}, {"app", "a:2"}, {"app", "a:3"}, {"db", "d:1"}, {"db", "d:2"}} {
		vec.WithLabelValues(lv[0], lv[1]).Observe(0.01)
	}
	// Label pairs come sorted by name: endpoint, then upstream.
	has := func(upstream, endpoint string) bool {
		return histogramOf(t, reg, "d_seconds", endpoint, upstream) != nil
	}

	if !vec.DeleteLabelValues("app", "a:1") || has("app", "a:1") {
		t.Error("DeleteLabelValues did not remove app a:1")
	}
	if vec.DeleteLabelValues("app", "a:1") {
		t.Error("DeleteLabelValues of a gone series reported a deletion")
	}
	if !vec.Delete(prometheus.Labels{"upstream": "app", "endpoint": "a:2"}) || has("app", "a:2") {
		t.Error("Delete did not remove app a:2")
	}
	if n := vec.DeletePartialMatch(prometheus.Labels{"upstream": "db"}); n != 2 || has("db", "d:1") || has("db", "d:2") {
		t.Errorf("DeletePartialMatch(upstream=db) deleted %d, want 2 and no db series left", n)
	}
	if !has("app", "a:3") {
		t.Error("app a:3 was deleted with the others")
	}
	if h := vec.WithLabelValues("app", "a:1"); h == nil {
		t.Fatal("no series made again after its deletion")
	}
	if h := histogramOf(t, reg, "d_seconds", "a:1", "app"); h == nil || h.GetSampleCount() != 0 {
		t.Errorf("a series made again after its deletion = %v, want a new one, empty", h)
	}
	vec.Reset()
	if has("app", "a:3") {
		t.Error("Reset left app a:3")
	}
}

// TestLabelValuesMustMatchLabels checks that a wrong number of label
// values is an error, and a panic from WithLabelValues.
func TestLabelValuesMustMatchLabels(t *testing.T) {
	vec := NewHistogramVec(prometheus.HistogramOpts{Name: "l_seconds", Help: "l."}, []string{"a", "b"})
	if _, err := vec.GetMetricWithLabelValues("x"); err == nil || !strings.Contains(err.Error(), "l_seconds") {
		t.Errorf("one value for two labels: err = %v, want an error naming l_seconds", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("WithLabelValues with one value for two labels did not panic")
		}
	}()
	vec.WithLabelValues("x")
}

// TestNewHistogramVecRejectsBadOptions checks each bad option panics with
// a message naming the histogram and what is wrong.
func TestNewHistogramVecRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name   string
		opts   prometheus.HistogramOpts
		labels []string
		want   string
	}{
		{"equal buckets", prometheus.HistogramOpts{Name: "b", Buckets: []float64{1, 2, 2}},
			nil, `"b": buckets must increase: bucket 1 is 2, bucket 2 is 2`},
		{"decreasing buckets", prometheus.HistogramOpts{Name: "b", Buckets: []float64{3, 1}},
			nil, `"b": buckets must increase: bucket 0 is 3, bucket 1 is 1`},
		{"NaN bucket", prometheus.HistogramOpts{Name: "b", Buckets: []float64{1, math.NaN()}},
			nil, `"b": buckets must increase: bucket 0 is 1, bucket 1 is NaN`},
		{"le label", prometheus.HistogramOpts{Name: "b"},
			[]string{"route", "le"}, `"b": "le" is not allowed as a label name`},
		{"le constant label", prometheus.HistogramOpts{Name: "b", ConstLabels: prometheus.Labels{"le": "1"}},
			nil, `"b": "le" is not allowed as a constant label name`},
		{"native histogram", prometheus.HistogramOpts{Name: "b", NativeHistogramBucketFactor: 1.1},
			nil, `"b": native histogram options are not supported`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg := fmt.Sprint(r); r == nil || !strings.Contains(msg, c.want) {
					t.Errorf("panic = %v, want one saying %s", r, c.want)
				}
			}()
			NewHistogramVec(c.opts, c.labels)
		})
	}
}

// TestShardsArePaddedPowersOfTwo checks the shard count for CPU counts
// and that every shard of a series starts on a cache line of its own.
func TestShardsArePaddedPowersOfTwo(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 16: 16, 17: 16, 256: 16} {
		if got := shardsFor(procs); got != want {
			t.Errorf("shardsFor(%d) = %d, want %d", procs, got, want)
		}
	}
	vec := NewHistogramVec(prometheus.HistogramOpts{Name: "p_seconds", Help: "p.", Buckets: latencyBuckets}, nil)
	h := vec.WithLabelValues().(*histogram)
	if shards, want := int(h.mask)+1, shardsFor(runtime.GOMAXPROCS(0)); shards != want {
		t.Errorf("a series has %d shards with GOMAXPROCS %d, want %d", shards, runtime.GOMAXPROCS(0), want)
	}
	if len(h.words) != (int(h.mask)+1)*h.stride {
		t.Errorf("%d words for %d shards of %d", len(h.words), h.mask+1, h.stride)
	}
	if h.stride*8%pshard.CacheLine != 0 || h.stride < 2+len(latencyBuckets) {
		t.Errorf("stride %d words: not whole cache lines, or too short for a sum and %d buckets", h.stride, len(latencyBuckets)+1)
	}
	if a := uintptr(unsafe.Pointer(&h.words[0])); a%pshard.CacheLine != 0 {
		t.Errorf("shard 0 at %#x, not on a %d-byte boundary", a, pshard.CacheLine)
	}
}

// TestFindBucket pins the bucket of values on and around bounds, NaN and
// infinities, as client_golang places them.
func TestFindBucket(t *testing.T) {
	bounds := []float64{1, 2, 4}
	for _, c := range []struct {
		v    float64
		want int
	}{
		{math.Inf(-1), 0}, {-1, 0}, {0, 0}, {1, 0}, {math.Nextafter(1, 2), 1}, {2, 1},
		{3, 2}, {4, 2}, {math.Nextafter(4, 5), 3}, {math.Inf(1), 3}, {math.NaN(), 3},
	} {
		if got := findBucket(bounds, c.v); got != c.want {
			t.Errorf("findBucket(%v, %v) = %d, want %d", bounds, c.v, got, c.want)
		}
	}
	if got := findBucket(nil, 1); got != 0 {
		t.Errorf("findBucket(no bounds, 1) = %d, want 0", got)
	}
}

// TestTokensSharingAShardPart has two goroutines observe with tokens on
// the same shard, as two Ps whose tokens collide: a failed
// compare-and-swap moves one of them, until they are on different shards,
// where they stay. No observation is lost on the way.
func TestTokensSharingAShardPart(t *testing.T) {
	prev := runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	defer runtime.GOMAXPROCS(prev)
	h := newVec(prometheus.HistogramOpts{Name: "t_seconds", Help: "t.", Buckets: latencyBuckets}, nil, 2).WithLabelValues().(*histogram)

	var tokens [2]atomic.Uint32 // both 0: shard 0
	parted := func() bool { return (tokens[0].Load()^tokens[1].Load())&h.mask != 0 }
	var observed [2]atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.observeIn(&tokens[i], 0.5)
				observed[i].Add(1)
			}
		})
	}
	halt := func() uint64 {
		close(stop)
		wg.Wait()
		return observed[0].Load() + observed[1].Load()
	}

	// Parted, and still parted once each goroutine has made an
	// observation begun after that (one in flight may still move a
	// token): from then on they share no shard, so nothing moves.
	deadline := time.Now().Add(20 * time.Second)
	for settled := false; !settled; {
		if time.Now().After(deadline) {
			n := halt()
			t.Fatalf("tokens %d and %d still on one shard after %d observations", tokens[0].Load(), tokens[1].Load(), n)
		}
		if parted() {
			a, b := observed[0].Load(), observed[1].Load()
			for (observed[0].Load() < a+2 || observed[1].Load() < b+2) && time.Now().Before(deadline) {
				runtime.Gosched()
			}
			settled = parted()
		}
		runtime.Gosched()
	}
	n := halt()
	if !parted() {
		t.Fatalf("tokens %d and %d back on one shard after they had parted", tokens[0].Load(), tokens[1].Load())
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.GetHistogram().GetSampleCount() != n || m.GetHistogram().GetSampleSum() != float64(n)/2 {
		t.Errorf("count %d, sum %v after %d observations of 0.5", m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(), n)
	}
}

// TestObserveDoesNotAllocate pins the hot path: an observation allocates
// nothing. (After each garbage collection the token pool, like every
// sync.Pool, makes its per-P array again, once; its new tokens allocate
// nothing.)
func TestObserveDoesNotAllocate(t *testing.T) {
	o := NewHistogramVec(prometheus.HistogramOpts{Name: "a_seconds", Help: "a.", Buckets: latencyBuckets}, nil).WithLabelValues()
	i := 0
	if allocs := testing.AllocsPerRun(1000, func() {
		o.Observe(spread[i&4095])
		i++
	}); allocs != 0 {
		t.Errorf("Observe allocates %v times, want 0", allocs)
	}
}
