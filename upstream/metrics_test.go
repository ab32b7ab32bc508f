package upstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/upstream"
)

// answer picks an endpoint of u and reports outcome o for it.
func answer(t *testing.T, u *upstream.Upstream, o endpoint.Outcome) {
	t.Helper()
	p, err := u.Pick(&balance.Info{})
	if err != nil {
		t.Fatal(err)
	}
	p.Done(o)
}

// TestEndpointAnswersAreCountedByClassWithTheirLatency pins the observer
// of each endpoint's answers: every answer counts in its status class and
// its latency in the endpoint's histogram; a transport failure, an outcome
// the caller gave up on and an L4 outcome (no status) count in neither;
// and the health machinery still hears every outcome (the endpoint's
// breaker opens).
func TestEndpointAnswersAreCountedByClassWithTheirLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1"), Breaker: &breaker.Config{ConsecutiveFailures: 3}},
		upstream.WithMetrics(upstream.NewMetrics(reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, o := range []endpoint.Outcome{
		{Status: 200, Latency: 10 * time.Millisecond},
		{Status: 204, Latency: 20 * time.Millisecond},
		{Status: 503, Latency: 30 * time.Millisecond},
		{Status: 200, Latency: time.Second, Canceled: true},
		{Status: 0, Latency: time.Second},
		{Err: errors.New("reset"), Latency: time.Second},
		{Err: errors.New("reset")},
		{Err: errors.New("reset")},
	} {
		answer(t, u, o)
	}
	classes := map[string]float64{}
	for _, m := range seriesOf(t, reg, "switchboard_endpoint_responses_total") {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "code" {
				classes[lp.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if len(classes) != 2 || classes["2xx"] != 2 || classes["5xx"] != 1 {
		t.Errorf("answers by class %v, want 2xx: 2 and 5xx: 1 only", classes)
	}
	hs := seriesOf(t, reg, "switchboard_endpoint_request_duration_seconds")
	if len(hs) != 1 {
		t.Fatalf("%d latency histograms, want 1", len(hs))
	}
	if h := hs[0].GetHistogram(); h.GetSampleCount() != 3 || h.GetSampleSum() < 0.0599 || h.GetSampleSum() > 0.0601 {
		t.Errorf("latency histogram of %d answers summing to %vs, want 3 summing to 60ms", h.GetSampleCount(), h.GetSampleSum())
	}
	if st := u.Pool().Snapshot().All[0].State(); st != endpoint.BreakerOpen {
		t.Errorf("the endpoint is %s after 3 resets, want breaker_open: the breaker no longer hears outcomes", st)
	}
}

// TestPerEndpointHistogramsCanBeTurnedOff pins metrics.per_endpoint_histograms:
// off, an upstream keeps no latency histogram per endpoint, and a reload
// that turns them off deletes the ones it had; the counters stay.
func TestPerEndpointHistogramsCanBeTurnedOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1")}, upstream.WithMetrics(upstream.NewMetrics(reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	answer(t, u, endpoint.Outcome{Status: 200, Latency: time.Millisecond})
	if n := len(seriesOf(t, reg, "switchboard_endpoint_request_duration_seconds")); n != 2 {
		t.Fatalf("%d latency histograms by default, want one per endpoint (2)", n)
	}
	off := false
	c, err := u.Prepare(upstream.Config{Targets: targets("a:1", "b:1"), Metrics: upstream.MetricsConfig{PerEndpointHistograms: &off}})
	if err != nil {
		t.Fatal(err)
	}
	c.Commit()
	answer(t, u, endpoint.Outcome{Status: 200, Latency: time.Millisecond})
	answer(t, u, endpoint.Outcome{Status: 200, Latency: time.Millisecond})
	if n := len(seriesOf(t, reg, "switchboard_endpoint_request_duration_seconds")); n != 0 {
		t.Fatalf("%d latency histograms after turning them off, want 0", n)
	}
	if n := len(seriesOf(t, reg, "switchboard_endpoint_responses_total")); n != 2 {
		t.Fatalf("%d answer counters after turning histograms off, want 2 (one per endpoint)", n)
	}
}

// TestPanicModeGauge pins switchboard_upstream_panic_mode: 0 while enough
// endpoints are ready, 1 below the threshold, 0 again after.
func TestPanicModeGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1"), Health: upstream.Health{PanicThreshold: 0.6}},
		upstream.WithMetrics(upstream.NewMetrics(reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	gauge := func() float64 {
		t.Helper()
		s := seriesOf(t, reg, "switchboard_upstream_panic_mode")
		if len(s) != 1 {
			t.Fatalf("%d panic mode series, want 1", len(s))
		}
		return s[0].GetGauge().GetValue()
	}
	if g := gauge(); g != 0 {
		t.Fatalf("panic mode %v with both endpoints ready, want 0", g)
	}
	b := u.Pool().Snapshot().All[1]
	b.SetStatus(endpoint.Unhealthy, "test", time.Now())
	u.Pool().Refresh()
	if g := gauge(); g != 1 {
		t.Fatalf("panic mode %v with 1 of 2 ready under 0.6, want 1", g)
	}
	b.SetStatus(endpoint.Healthy, "test", time.Now())
	u.Pool().Refresh()
	if g := gauge(); g != 0 {
		t.Fatalf("panic mode %v after the endpoint came back, want 0", g)
	}
}

// BenchmarkPickAndAnswer measures a pick and its outcome on an upstream
// without metrics and with them (the endpoint's answer series: a latency
// histogram and a status-class counter), in the same run: what the
// per-endpoint series add to a request.
func BenchmarkPickAndAnswer(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "without_metrics"
		var opts []upstream.Option
		if withMetrics {
			name = "with_metrics"
			opts = append(opts, upstream.WithMetrics(upstream.NewMetrics(prometheus.NewRegistry())))
		}
		b.Run(name, func(b *testing.B) {
			u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1", "c:1")}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer u.Close()
			o := endpoint.Outcome{Status: 200, Latency: 3 * time.Millisecond}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var info balance.Info
				for pb.Next() {
					p, err := u.Pick(&info)
					if err != nil {
						b.Fatal(err)
					}
					p.Done(o)
				}
			})
		})
	}
}
