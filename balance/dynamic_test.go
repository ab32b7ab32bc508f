package balance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

func newDynamic(t *testing.T, cfg DynamicWeightConfig) *DynamicWeight {
	t.Helper()
	if cfg.Refresh == 0 {
		cfg.Refresh = time.Hour
	}
	b := mustNew(t, Config{Policy: DynamicWeightName, DynamicWeight: cfg}, 1)
	return b.(*DynamicWeight)
}

// report sends one load report through a pick's Done.
func report(t *testing.T, b Balancer, ep *endpoint.Endpoint, raw string) {
	t.Helper()
	for range 1000 {
		r, err := b.Pick(&Info{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Endpoint == ep {
			r.Done(endpoint.Outcome{LoadReport: raw})
			return
		}
		r.Done(endpoint.Outcome{})
	}
	t.Fatalf("%s was not picked in 1000 picks", ep.Address())
}

// TestDynamicWeightFollowsCPUReport: an endpoint reporting cpu=0.9 scores
// 0.4*0.1 + 0.3 + 0.2 + 0.1 = 0.64 against 1 for two idle peers, so it gets
// 0.64/2.64 = 24.2% of the traffic.
func TestDynamicWeightFollowsCPUReport(t *testing.T) {
	eps := newEndpoints(1, 1, 1)
	d := newDynamic(t, DynamicWeightConfig{})
	d.Update(setOf(eps))
	report(t, d, eps[0], "cpu=0.9")
	report(t, d, eps[1], "cpu=0.0, mem=0.0")
	report(t, d, eps[2], "mem=0, cpu=0")
	d.rb.rebuildAt(time.Now())
	score := 0.4*(1-0.9) + 0.3 + 0.2 + 0.1
	want := []float64{score / (score + 2), 1 / (score + 2), 1 / (score + 2)}
	got := shares(t, d, eps, 100_000, false, endpoint.Outcome{})
	checkShares(t, "cpu=0.9 against two idle peers", got, want, 0.02)
}

func TestDynamicWeightScoreFormula(t *testing.T) {
	d := newDynamic(t, DynamicWeightConfig{LatencyCap: 200 * time.Millisecond, ErrorCap: 0.25, MinWeight: 0.2})
	clk := useFakeClock(d)
	eps := newEndpoints(1)
	d.Update(setOf(eps)) // the averages start at 0 now
	start := monoNow(clk)
	s := d.snap.Load().sides[0]
	s.report("cpu=0.5, mem=0.25")
	// One decay window later a 50ms success moves the latency average
	// (1-1/e) of the way from 0 to 50ms; the error rate stays 0.
	s.observe(start+int64(10*time.Second), &endpoint.Outcome{Latency: 50 * time.Millisecond})
	lat := (1 - math.Exp(-1)) * 50
	want := 0.4*0.5 + 0.3*0.75 + 0.2*(1-lat/200) + 0.1*1
	if got := s.score(); math.Abs(got-want) > 1e-9 {
		t.Fatalf("score %.6f, want %.6f", got, want)
	}
	// Errors only: after many failures over several decay windows the error
	// term is gone, and a saturated endpoint sits at min_weight.
	for i := range 1000 {
		s.observe(start+int64(i)*int64(100*time.Millisecond), &endpoint.Outcome{Status: 502})
	}
	s.report("cpu=1, mem=1")
	s.obs.lat.Store(math.Float64bits(float64(time.Second)))
	if got := s.score(); got != 0.2 {
		t.Fatalf("saturated endpoint scores %v, want min_weight 0.2", got)
	}
}

func TestDynamicWeightIgnoresGarbageReportsAndLogsOnce(t *testing.T) {
	var logs bytes.Buffer
	eps := newEndpoints(1, 1)
	d := newDynamic(t, DynamicWeightConfig{})
	d.p.log = slog.New(slog.NewTextHandler(&logs, nil))
	d.Update(setOf(eps))
	report(t, d, eps[0], "cpu=0.3, mem=0.2")
	d.rb.rebuildAt(time.Now())
	before := append([]float64(nil), d.snap.Load().w...)
	for _, raw := range []string{"cpu=1.5", "cpu=-0.1", "cpu=abc", "cpu", "mem=NaN", "cpu=0.5e3", "cpu=0x1p-2", "load=7", ",,,", "cpu=0.1, mem=2", "cpu=+0.5", "cpu=Inf"} {
		report(t, d, eps[0], raw)
	}
	d.rb.rebuildAt(time.Now())
	after := d.snap.Load().w
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("garbage reports changed the weights from %v to %v", before, after)
		}
	}
	if n := strings.Count(logs.String(), "ignoring load report"); n != 1 {
		t.Fatalf("logged %d lines for 12 bad reports from one endpoint, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), eps[0].Address()) {
		t.Fatalf("log line does not name the endpoint:\n%s", logs.String())
	}
}

func TestParseLoadReport(t *testing.T) {
	for in, want := range map[string][2]float64{
		"cpu=0.42, mem=0.31":  {0.42, 0.31},
		" mem=1 , cpu=0 ":     {0, 1},
		"cpu=.5":              {0.5, -1},
		"mem=0.7,conns=12":    {-1, 0.7},
		"cpu=0.42,mem=0.31,,": {0.42, 0.31},
	} {
		var facs [maxFactors]float64
		cpu, mem, err := parseLoadReport(in, nil, &facs)
		if err != nil || cpu != want[0] || mem != want[1] {
			t.Errorf("parseLoadReport(%q) = %v, %v, %v; want %v", in, cpu, mem, err, want)
		}
	}
}

// TestParseLoadReportReadsConfiguredFactors: a configured factor takes any
// decimal >= 0 (no [0, 1] bound), an absent one is NaN, an unconfigured one
// is ignored whatever its value, and a report with only a factor counts.
func TestParseLoadReportReadsConfiguredFactors(t *testing.T) {
	factors := []dwFactor{{name: "inventory", coef: 1, max: 1}, {name: "queue_depth", coef: 1, max: 1}}
	nan := math.NaN()
	for _, tc := range []struct {
		in       string
		cpu, mem float64
		facs     [2]float64
		err      error
	}{
		{"cpu=0.4, queue_depth=17, inventory=250.5", 0.4, -1, [2]float64{250.5, 17}, nil},
		{"queue_depth=0", -1, -1, [2]float64{nan, 0}, nil},
		{"mem=0.5, disk=-3, Queue_Depth=4", -1, 0.5, [2]float64{nan, nan}, nil},
		{"queue_depth=-1, cpu=0.2", -1, -1, [2]float64{nan, nan}, errReportSyntax},
		{"queue_depth=1e3", -1, -1, [2]float64{nan, nan}, errReportSyntax},
		{"disk=3", -1, -1, [2]float64{nan, nan}, errReportEmpty},
	} {
		var facs [maxFactors]float64
		cpu, mem, err := parseLoadReport(tc.in, factors, &facs)
		if err != tc.err {
			t.Errorf("parseLoadReport(%q) error %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
		if cpu != tc.cpu || mem != tc.mem || !same(facs[0], tc.facs[0]) || !same(facs[1], tc.facs[1]) {
			t.Errorf("parseLoadReport(%q) = cpu %v mem %v factors %v; want %v %v %v", tc.in, cpu, mem, facs[:2], tc.cpu, tc.mem, tc.facs)
		}
	}
}

// TestDynamicWeightCustomFactorScore pins the score with custom factors:
// each term normalised by its max (low or high preferred), weighed by its
// coefficient beside the four built-in ones; a factor missing from the
// latest report drops out of both the sum and the divisor.
func TestDynamicWeightCustomFactorScore(t *testing.T) {
	d := newDynamic(t, DynamicWeightConfig{Factors: map[string]DynamicFactor{
		"queue_depth": {Coefficient: 0.3, Max: 100},
		"inventory":   {Coefficient: 0.2, Max: 50, Prefer: PreferHigh},
	}})
	useFakeClock(d)
	eps := newEndpoints(1)
	d.Update(setOf(eps))
	s := d.snap.Load().sides[0]
	// Defaults 0.4, 0.3, 0.2, 0.1 (sum 1), idle latency and errors.
	builtin := func(cpu float64) float64 { return 0.4*(1-cpu) + 0.3 + 0.2 + 0.1 }

	if got, want := s.score(), builtin(0); got != want {
		t.Fatalf("before any report: score %v, want %v (factors neutral)", got, want)
	}
	s.report("cpu=0.5, queue_depth=25, inventory=10")
	want := (builtin(0.5) + 0.3*(1-0.25) + 0.2*(10.0/50)) / 1.5
	if got := s.score(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("cpu=0.5, queue_depth=25, inventory=10: score %v, want %v", got, want)
	}
	s.report("queue_depth=400") // over max counts as max; inventory now neutral, cpu kept
	want = (builtin(0.5) + 0) / 1.3
	if got := s.score(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("queue_depth=400: score %v, want %v", got, want)
	}
	s.report("cpu=0.5, inventory=80, stock=9")
	want = (builtin(0.5) + 0.2) / 1.2
	if got := s.score(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("inventory=80 (over max, high preferred): score %v, want %v", got, want)
	}
}

// TestDynamicWeightFactorCoefficientsFollowBuiltinScale: when the built-in
// coefficients are given, a factor's coefficient is relative to them as
// written (cpu: 2 and queue_depth: 2 weigh the same).
func TestDynamicWeightFactorCoefficientsFollowBuiltinScale(t *testing.T) {
	d := newDynamic(t, DynamicWeightConfig{CPU: 2, Factors: map[string]DynamicFactor{"queue_depth": {Coefficient: 2, Max: 10}}})
	eps := newEndpoints(1)
	d.Update(setOf(eps))
	s := d.snap.Load().sides[0]
	s.report("cpu=1, queue_depth=0")
	if got := s.score(); got != 0.5 {
		t.Fatalf("busy cpu, empty queue, equal coefficients: score %v, want 0.5", got)
	}
}

// TestDynamicWeightReportAllocatesNothing: a Done carrying a load report
// with custom factors costs no allocation, nor does a malformed one.
func TestDynamicWeightReportAllocatesNothing(t *testing.T) {
	d := newDynamic(t, DynamicWeightConfig{Factors: map[string]DynamicFactor{"queue_depth": {Coefficient: 0.3, Max: 100}, "inventory": {Coefficient: 0.1}}})
	d.p.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	d.Update(setOf(newEndpoints(1, 1)))
	for _, raw := range []string{"cpu=0.42, mem=0.31, queue_depth=17, inventory=0.5", "queue_depth=x"} {
		o := endpoint.Outcome{Status: 200, Latency: time.Millisecond, LoadReport: raw}
		if n := testing.AllocsPerRun(200, func() {
			r, _ := d.Pick(&Info{})
			r.Done(o)
		}); n != 0 {
			t.Errorf("Pick+Done with report %q allocates %v times, want 0", raw, n)
		}
	}
}

// TestDynamicWeightRefreshesFromDone: with no Run, a Done after Refresh has
// passed rebuilds the table, and one before it does not.
func TestDynamicWeightRefreshesFromDone(t *testing.T) {
	eps := newEndpoints(1, 1)
	d := newDynamic(t, DynamicWeightConfig{Refresh: time.Second})
	clk := useFakeClock(d)
	d.Update(setOf(eps))
	report(t, d, eps[0], "cpu=1, mem=1")
	if w := d.snap.Load().w; w[0] != w[1] {
		t.Fatalf("weights %v changed before the refresh was due", w)
	}
	clk.Advance(time.Second)
	report(t, d, eps[1], "cpu=0")
	if w := d.snap.Load().w; !(w[0] < w[1]) {
		t.Fatalf("weights %v did not follow the report after the refresh was due", w)
	}
}

// TestDynamicWeightPollsEndpoints runs Run against two real HTTP servers:
// one reports in the header, the other in the body.
func TestDynamicWeightPollsEndpoints(t *testing.T) {
	hits := make(chan string, 16)
	header := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		w.Header().Set("X-Switchboard-Load", "cpu=0.9, mem=0.5")
	}))
	defer header.Close()
	body := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		fmt.Fprintln(w, "cpu=0.1, mem=0.2")
	}))
	defer body.Close()

	eps := []*endpoint.Endpoint{
		endpoint.New(endpoint.Spec{Address: header.Listener.Addr().String()}),
		endpoint.New(endpoint.Spec{Address: body.Listener.Addr().String()}),
	}
	d := newDynamic(t, DynamicWeightConfig{PollPath: "/load", PollInterval: time.Hour})
	polled := make(chan struct{}, 1)
	d.afterPoll = func() { polled <- struct{}{} }
	d.Update(setOf(eps))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- d.Run(ctx) }()
	select {
	case <-polled:
	case <-time.After(10 * time.Second):
		t.Fatal("no poll round finished within 10s")
	}
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	close(hits)
	for p := range hits {
		if p != "/load" {
			t.Errorf("polled %q, want /load", p)
		}
	}
	s := d.snap.Load()
	for i, want := range [][2]float64{{0.9, 0.5}, {0.1, 0.2}} {
		cpu := math.Float64frombits(s.sides[i].cpu.Load())
		mem := math.Float64frombits(s.sides[i].mem.Load())
		if cpu != want[0] || mem != want[1] {
			t.Errorf("endpoint %d: polled cpu=%v mem=%v, want %v", i, cpu, mem, want)
		}
	}
	if !(s.w[0] < s.w[1]) {
		t.Errorf("weights %v after polling: the cpu=0.9 endpoint should weigh less", s.w)
	}
}
