package balance

import (
	"bytes"
	"context"
	"fmt"
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
	s.observe(start+int64(10*time.Second), endpoint.Outcome{Latency: 50 * time.Millisecond})
	lat := (1 - math.Exp(-1)) * 50
	want := 0.4*0.5 + 0.3*0.75 + 0.2*(1-lat/200) + 0.1*1
	if got := s.score(); math.Abs(got-want) > 1e-9 {
		t.Fatalf("score %.6f, want %.6f", got, want)
	}
	// Errors only: after many failures over several decay windows the error
	// term is gone, and a saturated endpoint sits at min_weight.
	for i := range 1000 {
		s.observe(start+int64(i)*int64(100*time.Millisecond), endpoint.Outcome{Status: 502})
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
		cpu, mem, err := parseLoadReport(in)
		if err != nil || cpu != want[0] || mem != want[1] {
			t.Errorf("parseLoadReport(%q) = %v, %v, %v; want %v", in, cpu, mem, err, want)
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
