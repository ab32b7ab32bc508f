package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/pshard"
)

var passiveT0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

type passiveEvent struct {
	addr   string
	state  endpoint.State
	reason string
	at     time.Time
}

// passiveRig is a Detector over n endpoints with a fake clock and a log of
// its transitions.
type passiveRig struct {
	d      *Detector
	clk    *clock.Fake
	eps    []*endpoint.Endpoint
	mu     sync.Mutex
	events []passiveEvent
}

func newPassiveRig(t testing.TB, n int, cfg PassiveConfig, opts ...DetectorOption) *passiveRig {
	t.Helper()
	r := &passiveRig{clk: clock.NewFake(passiveT0)}
	for i := range n {
		r.eps = append(r.eps, endpoint.New(endpoint.Spec{Address: fmt.Sprintf("10.0.0.%d:80", i+1)}))
	}
	opts = append([]DetectorOption{
		WithDetectorClock(r.clk.Now),
		WithDetectorOnChange(func(ep *endpoint.Endpoint, s endpoint.State, reason string, now time.Time) {
			r.mu.Lock()
			r.events = append(r.events, passiveEvent{ep.Address(), s, reason, now})
			r.mu.Unlock()
		}),
	}, opts...)
	d, err := NewDetector(cfg, opts...)
	if err != nil {
		t.Fatalf("NewDetector: %v", err)
	}
	d.Update(r.eps)
	r.d = d
	return r
}

// advance moves the rig's clock on by d and returns the new time.
func (r *passiveRig) advance(d time.Duration) time.Time {
	r.clk.Advance(d)
	return r.clk.Now()
}

func (r *passiveRig) log() []passiveEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]passiveEvent(nil), r.events...)
}

func (r *passiveRig) state(t *testing.T, i int) endpoint.State {
	t.Helper()
	s, ok := r.d.State(r.eps[i])
	if !ok {
		t.Fatalf("endpoint %d not tracked", i)
	}
	return s
}

func (r *passiveRig) observe(i, times int, o endpoint.Outcome) {
	for range times {
		r.d.Observe(r.eps[i], o)
	}
}

var (
	passiveConnErr = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	passiveFail    = endpoint.Outcome{Err: passiveConnErr, Latency: time.Millisecond}
	passiveOK      = endpoint.Outcome{Status: 200, Latency: time.Millisecond}
)

func TestEjectsAfterExactlyNConsecutiveFailures(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 5})
	r.observe(0, 4, passiveFail)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("after 4 of 5 failures: state %v, want healthy", s)
	}
	r.advance(12 * time.Second)
	r.observe(0, 1, passiveFail)
	if s := r.state(t, 0); s != endpoint.Ejected {
		t.Fatalf("after 5 failures: state %v, want ejected", s)
	}
	ev := r.log()
	want := "ejected: 5 consecutive failures (last: connect error) at 03:00:12, until 03:00:42"
	if len(ev) != 1 || ev[0].state != endpoint.Ejected || ev[0].reason != want {
		t.Fatalf("events %+v, want one ejection with reason %q", ev, want)
	}
}

func TestSuccessResetsConsecutiveFailures(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 3})
	for range 5 {
		r.observe(0, 2, passiveFail)
		r.observe(0, 1, passiveOK)
	}
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("2 failures then a success, five times: state %v, want healthy", s)
	}
	// A status outside the failure set is an answer: it resets too.
	r.observe(0, 2, passiveFail)
	r.observe(0, 1, endpoint.Outcome{Status: 500})
	r.observe(0, 2, passiveFail)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("a 500 (not in the set) between failures: state %v, want healthy", s)
	}
}

func TestCanceledOutcomesIgnored(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 3})
	canceled := endpoint.Outcome{Err: errors.New("context canceled"), Canceled: true}
	r.observe(0, 2, passiveFail)
	r.observe(0, 10, canceled)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("canceled outcomes counted: state %v", s)
	}
	r.observe(0, 1, passiveFail) // canceled ones did not reset the run either
	if s := r.state(t, 0); s != endpoint.Ejected {
		t.Fatalf("third real failure after canceled ones: state %v, want ejected", s)
	}
}

func TestFailureStatusesConfigurable(t *testing.T) {
	// Default: 503 counts, 500 does not.
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2})
	r.observe(0, 2, endpoint.Outcome{Status: 500})
	r.observe(1, 2, endpoint.Outcome{Status: 503})
	if s0, s1 := r.state(t, 0), r.state(t, 1); s0 != endpoint.Healthy || s1 != endpoint.Ejected {
		t.Fatalf("default set: 500s -> %v (want healthy), 503s -> %v (want ejected)", s0, s1)
	}
	if got := r.log()[0].reason; !strings.Contains(got, "(last: status 503)") {
		t.Errorf("reason %q does not name the status", got)
	}

	// Configured: 500 counts, 503 does not.
	r = newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2, FailureStatuses: []int{500}})
	r.observe(0, 2, endpoint.Outcome{Status: 500})
	r.observe(1, 2, endpoint.Outcome{Status: 503})
	if s0, s1 := r.state(t, 0), r.state(t, 1); s0 != endpoint.Ejected || s1 != endpoint.Healthy {
		t.Fatalf("set {500}: 500s -> %v (want ejected), 503s -> %v (want healthy)", s0, s1)
	}

	// Empty set: only transport errors count.
	r = newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2, FailureStatuses: []int{}})
	r.observe(0, 5, endpoint.Outcome{Status: 503})
	r.observe(1, 2, passiveFail)
	if s0, s1 := r.state(t, 0), r.state(t, 1); s0 != endpoint.Healthy || s1 != endpoint.Ejected {
		t.Fatalf("empty set: 503s -> %v (want healthy), errors -> %v (want ejected)", s0, s1)
	}
}

// ejectAndExpire ejects endpoint i with consecutive failures and returns how
// long the ejection lasted, found by ticking a second at a time.
func (r *passiveRig) ejectAndExpire(t *testing.T, i int, failures int) time.Duration {
	t.Helper()
	start := r.clk.Now()
	r.observe(i, failures, passiveFail)
	if s := r.state(t, i); s != endpoint.Ejected {
		t.Fatalf("state %v after %d failures, want ejected", s, failures)
	}
	for range 10000 {
		r.d.Tick(r.advance(time.Second))
		if r.state(t, i) == endpoint.Probation {
			return r.clk.Now().Sub(start)
		}
	}
	t.Fatal("never left ejection")
	return 0
}

func TestEjectionTimeGrowsAndCaps(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 3, BaseEjection: 30 * time.Second, MaxEjection: 100 * time.Second})
	// First ejection by consecutive failures, then each failure on
	// probation re-ejects with the next multiple.
	want := []time.Duration{30 * time.Second, 60 * time.Second, 90 * time.Second, 100 * time.Second, 100 * time.Second}
	for k, w := range want {
		n := 3
		if k > 0 {
			n = 1 // on probation, one failure is enough
		}
		if got := r.ejectAndExpire(t, 0, n); got != w {
			t.Fatalf("ejection %d lasted %v, want %v", k+1, got, w)
		}
	}
}

func TestEjectionMultiplierDecaysWhileHealthy(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 1, RecoverySuccesses: 1})
	r.ejectAndExpire(t, 0, 1)
	r.observe(0, 1, passiveFail) // k = 2
	if got := r.ejectAndExpire(t, 0, 0); got != 60*time.Second {
		t.Fatalf("second ejection %v, want 60s", got)
	}
	r.observe(0, 1, passiveOK) // healthy
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("state %v, want healthy", s)
	}
	// Two base periods healthy take k from 2 to 0: the next is 30s again.
	r.advance(61 * time.Second)
	if got := r.ejectAndExpire(t, 0, 1); got != 30*time.Second {
		t.Fatalf("ejection after a long healthy spell lasted %v, want 30s", got)
	}
}

func TestMaxEjectedPercent(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2}) // 50% of 4 = 2
	for i := range 3 {
		r.observe(i, 10, passiveFail)
	}
	var ejected []string
	for i := range 4 {
		if r.state(t, i) == endpoint.Ejected {
			ejected = append(ejected, r.eps[i].Address())
		}
	}
	if len(ejected) != 2 || r.state(t, 2) != endpoint.Healthy {
		t.Fatalf("ejected %v, want exactly the first two of three failing endpoints", ejected)
	}
	// When one comes back, the third may go.
	r.d.Tick(r.advance(30 * time.Second))
	r.observe(2, 2, passiveFail)
	if s := r.state(t, 2); s != endpoint.Ejected {
		t.Fatalf("third failing endpoint after budget freed: %v, want ejected", s)
	}
}

func TestMaxEjectedAllowsOneInSmallPool(t *testing.T) {
	r := newPassiveRig(t, 3, PassiveConfig{ConsecutiveFailures: 1, MaxEjectedPercent: 10}) // 10% of 3 rounds to 0
	r.observe(0, 1, passiveFail)
	r.observe(1, 1, passiveFail)
	if s0, s1 := r.state(t, 0), r.state(t, 1); s0 != endpoint.Ejected || s1 != endpoint.Healthy {
		t.Fatalf("10%% of 3: states %v, %v; want exactly one ejected", s0, s1)
	}
	single := newPassiveRig(t, 1, PassiveConfig{ConsecutiveFailures: 1})
	single.observe(0, 5, passiveFail)
	if s := single.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("pool of one at 50%%: %v, want never ejected", s)
	}
}

func TestProbationRecoversAfterSuccesses(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2, RecoverySuccesses: 3})
	r.observe(0, 2, passiveFail)
	r.d.Tick(r.advance(29 * time.Second))
	if s := r.state(t, 0); s != endpoint.Ejected {
		t.Fatalf("29s into a 30s ejection: %v", s)
	}
	r.d.Tick(r.advance(time.Second))
	if s := r.state(t, 0); s != endpoint.Probation {
		t.Fatalf("at 30s: %v, want probation", s)
	}
	r.observe(0, 2, passiveOK)
	if s := r.state(t, 0); s != endpoint.Probation {
		t.Fatalf("2 of 3 successes: %v, want probation", s)
	}
	r.observe(0, 1, passiveOK)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("3 successes: %v, want healthy", s)
	}
	ev := r.log()
	got := []string{}
	for _, e := range ev {
		got = append(got, e.reason)
	}
	want := []string{
		"ejected: 2 consecutive failures (last: connect error) at 03:00:00, until 03:00:30",
		"probation: ejection time over",
		"healthy: 3 successes on probation",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("reasons\n got %q\nwant %q", got, want)
	}
}

func TestFailureOnProbationReejectsLonger(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2})
	r.observe(0, 2, passiveFail)
	r.d.Tick(r.advance(30 * time.Second))
	r.observe(0, 1, passiveOK)
	r.observe(0, 1, endpoint.Outcome{Err: errors.New("read: connection reset"), Status: 0})
	ev := r.log()
	last := ev[len(ev)-1]
	want := "ejected: failed on probation (transport error) at 03:00:30, until 03:01:30"
	if last.state != endpoint.Ejected || last.reason != want {
		t.Fatalf("last passiveEvent %+v, want ejection %q", last, want)
	}
}

func TestOutcomesWhileEjectedIgnored(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 2, RecoverySuccesses: 2})
	r.observe(0, 2, passiveFail)
	r.observe(0, 5, passiveOK) // in-flight stragglers
	r.d.Tick(r.advance(30 * time.Second))
	if s := r.state(t, 0); s != endpoint.Probation {
		t.Fatalf("%v, want probation", s)
	}
	r.observe(0, 1, passiveOK)
	if s := r.state(t, 0); s != endpoint.Probation {
		t.Fatalf("successes while ejected counted toward recovery: %v", s)
	}
}

func TestFailureRateRespectsMinRequests(t *testing.T) {
	cfg := PassiveConfig{ConsecutiveFailures: 100, FailureRate: 0.5, MinRequests: 20, Window: 10 * time.Second}
	r := newPassiveRig(t, 4, cfg)
	// 19 requests, 10 failing (53%): not enough requests yet.
	for range 9 {
		r.observe(0, 1, passiveOK)
		r.observe(0, 1, passiveFail)
		r.advance(100 * time.Millisecond)
	}
	r.observe(0, 1, passiveFail)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("19 requests: %v, want healthy (min_requests 20)", s)
	}
	r.observe(0, 1, passiveFail) // 20 requests, 11 failed
	if s := r.state(t, 0); s != endpoint.Ejected {
		t.Fatalf("20 requests, 11 failed: %v, want ejected", s)
	}
	if got, want := r.log()[0].reason, "ejected: failure rate 55% (11 of 20) over 10s at 03:00:00, until 03:00:30"; got != want {
		t.Fatalf("reason %q, want %q", got, want)
	}

	// Below the threshold nothing happens, however many requests.
	r = newPassiveRig(t, 4, cfg)
	for range 100 {
		r.observe(1, 2, passiveOK)
		r.observe(1, 1, passiveFail)
	}
	if s := r.state(t, 1); s != endpoint.Healthy {
		t.Fatalf("33%% failures: %v, want healthy", s)
	}
}

func TestFailureRateWindowSlides(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 100, FailureRate: 0.5, MinRequests: 20, Window: 10 * time.Second})
	r.observe(0, 15, passiveFail)
	r.observe(0, 1, passiveOK)
	r.advance(11 * time.Second) // those fall out of the window
	r.observe(0, 10, passiveOK)
	r.observe(0, 9, passiveFail)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("old failures still counted: %v", s)
	}
}

func passiveLatencyRig(t *testing.T, factor float64) *passiveRig {
	r := newPassiveRig(t, 4, PassiveConfig{LatencyFactor: factor, MinRequests: 20})
	for range 50 {
		for i := range 3 {
			r.observe(i, 1, endpoint.Outcome{Status: 200, Latency: time.Millisecond + time.Duration(i)*50*time.Microsecond})
		}
		r.observe(3, 1, endpoint.Outcome{Status: 200, Latency: 201 * time.Millisecond})
		r.advance(100 * time.Millisecond)
	}
	r.d.Tick(r.clk.Now())
	return r
}

func TestLatencyOutlierEjected(t *testing.T) {
	r := passiveLatencyRig(t, 3)
	for i := range 3 {
		if s := r.state(t, i); s != endpoint.Healthy {
			t.Fatalf("fast endpoint %d: %v", i, s)
		}
	}
	if s := r.state(t, 3); s != endpoint.Ejected {
		t.Fatalf("endpoint 200ms slower: %v, want ejected", s)
	}
	// Medians are reported at the histogram's resolution (about 20%).
	want := "ejected: median latency 213ms > 3 x pool median 1.15ms over 10s at 03:00:05, until 03:00:35"
	if got := r.log()[0].reason; got != want {
		t.Fatalf("reason %q, want %q", got, want)
	}
}

func TestLatencyOutlierOffByDefault(t *testing.T) {
	r := passiveLatencyRig(t, 0)
	if s := r.state(t, 3); s != endpoint.Healthy {
		t.Fatalf("latency factor off: %v, want healthy", s)
	}
}

func TestFailureSignalOnFirstFailureOfRun(t *testing.T) {
	var signals []string
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 5},
		WithDetectorFailureSignal(func(ep *endpoint.Endpoint) { signals = append(signals, ep.Address()) }))
	r.observe(0, 3, passiveFail)
	r.observe(0, 1, passiveOK)
	r.observe(0, 1, passiveFail)
	if len(signals) != 2 {
		t.Fatalf("signals %v, want 2 (one per run of failures)", signals)
	}
}

func TestUpdateForgetsRemovedEndpoints(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 1})
	r.observe(0, 1, passiveFail)
	r.observe(1, 1, passiveFail)
	r.d.Update(r.eps[1:]) // ejected endpoint 0 leaves: one ejected of three
	if _, ok := r.d.State(r.eps[0]); ok {
		t.Fatal("removed endpoint still tracked")
	}
	r.observe(2, 1, passiveFail) // 50% of 3 = 1, and endpoint 1 holds it
	if s := r.state(t, 2); s != endpoint.Healthy {
		t.Fatalf("budget after removal: endpoint 2 %v, want healthy", s)
	}
	r.d.Observe(r.eps[0], passiveFail) // untracked: ignored, no panic
}

func TestApplyToSetsStatusAndRefreshes(t *testing.T) {
	pool := endpoint.NewPool("orders")
	pool.Update([]endpoint.Spec{{Address: "a:80"}, {Address: "b:80"}})
	clk := clock.NewFake(passiveT0)
	d, err := NewDetector(PassiveConfig{ConsecutiveFailures: 1},
		WithDetectorClock(clk.Now), WithDetectorOnChange(ApplyTo(pool)))
	if err != nil {
		t.Fatal(err)
	}
	cancel := pool.Subscribe(func(s *endpoint.Set) { d.Update(s.All) })
	defer cancel()
	a := pool.Snapshot().All[0]
	d.Observe(a, passiveFail)
	if got := pool.Snapshot(); len(got.Ready) != 1 || got.Ready[0].Address() != "b:80" {
		t.Fatalf("ready after ejecting a: %v", got.Ready)
	}
	if st := a.Status(); st.State != endpoint.Ejected || !strings.HasPrefix(st.Reason, "ejected: 1 consecutive failures") {
		t.Fatalf("a's status %+v", st)
	}
}

func TestPassiveConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  PassiveConfig
		want string
	}{
		{PassiveConfig{ConsecutiveFailures: -1}, "consecutive_failures: must be at least 1, got -1"},
		{PassiveConfig{BaseEjection: -time.Second}, "base_ejection: must be positive, got -1s"},
		{PassiveConfig{MaxEjectedPercent: 101}, "max_ejected_percent: must be 1 to 100, got 101"},
		{PassiveConfig{FailureRate: 1.5}, "failure_rate: must be between 0 (off) and 1, got 1.5"},
		{PassiveConfig{LatencyFactor: 0.5}, "latency_factor: must be above 1, or 0 (off), got 0.5"},
		{PassiveConfig{FailureStatuses: []int{503, 5030}}, "failure_statuses[1]: 5030 is not an HTTP status"},
		{PassiveConfig{BaseEjection: time.Minute, MaxEjection: time.Second}, "max_ejection: 1s is below base_ejection 1m0s"},
		{PassiveConfig{Window: time.Millisecond}, "window: must be at least 10ms, got 1ms"},
		{PassiveConfig{RecoverySuccesses: -2}, "recovery_successes: must be at least 1, got -2"},
		{PassiveConfig{MinRequests: -1, LatencyFactor: 1}, "min_requests: must be at least 1, got -1\nlatency_factor: must be above 1, or 0 (off), got 1"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (PassiveConfig{}).Validate(); err != nil {
		t.Errorf("zero config (all defaults): %v", err)
	}
	d, _ := NewDetector(PassiveConfig{BaseEjection: 10 * time.Minute})
	if got := d.Config().MaxEjection; got != 10*time.Minute {
		t.Errorf("default max_ejection with a 10m base: %v, want raised to 10m", got)
	}
}

func TestObserveConcurrent(t *testing.T) {
	r := newPassiveRig(t, 8, PassiveConfig{ConsecutiveFailures: 3, FailureRate: 0.5, LatencyFactor: 3, RecoverySuccesses: 1})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				o := passiveOK
				if (i+g)%3 == 0 {
					o = passiveFail
				}
				r.d.Observe(r.eps[(i+g)%len(r.eps)], o)
				if i%100 == 0 {
					r.d.Tick(r.advance(time.Second))
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			r.d.Update(r.eps)
			r.d.Update(r.eps[:7])
		}
	}()
	wg.Wait()
	r.d.Update(r.eps)
	ejected := 0
	for i := range r.eps {
		if r.state(t, i) == endpoint.Ejected {
			ejected++
		}
	}
	if ejected > 4 {
		t.Fatalf("%d of 8 ejected, max 50%%", ejected)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	// Every endpoint sees a mix (2 failures in 5 counted outcomes) that stays
	// below every threshold: this measures the path almost every request
	// takes. Ejections allocate their reason, rarely.
	r := newPassiveRig(t, 4, PassiveConfig{FailureRate: 0.9, LatencyFactor: 3, ConsecutiveFailures: 1 << 30})
	outcomes := []endpoint.Outcome{passiveOK, passiveFail, {Status: 503}, {Err: passiveConnErr, Canceled: true}, passiveOK, passiveOK}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		r.d.Observe(r.eps[i%4], outcomes[(i/4)%len(outcomes)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("Observe allocates %v times per call, want 0", allocs)
	}
	if ev := r.log(); len(ev) != 0 {
		t.Fatalf("the allocation test made decisions (%v); it must measure the plain path", ev)
	}
}

func BenchmarkObserve(b *testing.B) {
	r := newPassiveRig(b, 16, PassiveConfig{FailureRate: 0.5, LatencyFactor: 3, ConsecutiveFailures: 1 << 30})
	r.d.clock = clock.Real
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			o := passiveOK
			if i%10 == 0 {
				o = passiveFail
			}
			r.d.Observe(r.eps[i%len(r.eps)], o)
			i++
		}
	})
}

func TestDescribeOutlierFailure(t *testing.T) {
	cases := []struct {
		err    error
		status int
		want   string
	}{
		{nil, 503, "status 503"},
		{passiveConnErr, 0, "connect error"},
		{fmt.Errorf("proxy: %w", context.DeadlineExceeded), 0, "timeout"},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, 0, "connection reset"},
		{errors.New("tls: bad certificate"), 0, "transport error"},
	}
	for _, c := range cases {
		if got := describeOutlierFailure(c.err, c.status); got != c.want {
			t.Errorf("describeOutlierFailure(%v, %d) = %q, want %q", c.err, c.status, got, c.want)
		}
	}
}

func TestOutlierLatencyBinsAreMonotonicAndClose(t *testing.T) {
	prev := -1
	for us := 0; us < 1<<22; us = us*9/8 + 1 {
		d := time.Duration(us) * time.Microsecond
		b := outlierLatBin(d)
		if b < prev {
			t.Fatalf("bin of %v is %d, below the bin of a shorter latency (%d)", d, b, prev)
		}
		prev = b
		if v := outlierLatValue(b); us >= 4 && (float64(v) < 0.8*float64(d) || float64(v) > 1.25*float64(d)) {
			t.Fatalf("%v reported as %v: off by more than 25%%", d, v)
		}
	}
}

func TestUnejectPutsAnEjectedEndpointOnProbation(t *testing.T) {
	p := endpoint.NewPool("u")
	p.Update([]endpoint.Spec{{Address: "a:1"}, {Address: "b:1"}})
	eps := p.Snapshot().All
	now := time.Unix(1000, 0)
	var got []endpoint.State
	d, err := NewDetector(PassiveConfig{ConsecutiveFailures: 2, BaseEjection: time.Minute},
		WithDetectorClock(func() time.Time { return now }),
		WithDetectorOnChange(func(ep *endpoint.Endpoint, st endpoint.State, _ string, _ time.Time) { got = append(got, st) }))
	if err != nil {
		t.Fatal(err)
	}
	d.Update(eps)
	d.Uneject(eps[0], "active check passed", now) // not ejected: nothing happens
	for i := 0; i < 2; i++ {
		d.Observe(eps[0], endpoint.Outcome{Err: errors.New("refused")})
	}
	d.Uneject(eps[0], "active check passed", now.Add(time.Second))
	if st, _ := d.State(eps[0]); st != endpoint.Probation || len(got) != 2 || got[0] != endpoint.Ejected || got[1] != endpoint.Probation {
		t.Fatalf("state %v, changes %v; want ejected then probation", st, got)
	}
}

// observeFrom has goroutines observe at once, each its own list of
// outcomes in order, and waits for all of them.
func (r *passiveRig) observeFrom(lists [][]endpoint.Outcome, i int) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, list := range lists {
		wg.Go(func() {
			<-start
			for _, o := range list {
				r.d.Observe(r.eps[i], o)
			}
		})
	}
	close(start)
	wg.Wait()
}

// wantEvents fails t unless the rig's transitions so far had exactly the
// reasons want.
func (r *passiveRig) wantEvents(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for _, ev := range r.log() {
		got = append(got, ev.reason)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("transitions %q, want %q", got, want)
	}
}

// TestConcurrentObservationsGiveTheFailureRateExactSums has 8 goroutines
// record successes and failures on one endpoint at once, in two bursts a
// few seconds apart (so in several buckets and, with more than one CPU,
// in several shards), at a failure share that never reaches the rate:
// the endpoint must then be ejected by exactly the failure that brings
// the window's sums to the rate, with the sums in its reason.
func TestConcurrentObservationsGiveTheFailureRateExactSums(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{ConsecutiveFailures: 1 << 30, FailureRate: 0.5, MinRequests: 20})
	// Each goroutine: 3 successes, then a failure, 20 times over: at
	// most a quarter of every prefix failed, so however the goroutines
	// interleave the window never holds half failures.
	lists := make([][]endpoint.Outcome, 8)
	for g := range lists {
		for range 20 {
			lists[g] = append(lists[g], passiveOK, passiveOK, passiveOK, passiveFail)
		}
	}
	r.observeFrom(lists, 0)
	r.advance(3 * time.Second)
	r.observeFrom(lists, 0)
	r.advance(3 * time.Second)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("after 1280 requests, 320 failed: %v, want healthy", s)
	}
	// 1280 requests, 320 failed: the 640th more failure makes 960 of
	// 1920, half; one failure fewer is below.
	for k := 1; k < 640; k++ {
		r.observe(0, 1, passiveFail)
		if s := r.state(t, 0); s != endpoint.Healthy {
			t.Fatalf("ejected after %d more failures (%d of %d failed, below half): %v", k, 320+k, 1280+k, r.log())
		}
	}
	r.observe(0, 1, passiveFail)
	if s := r.state(t, 0); s != endpoint.Ejected {
		t.Fatalf("960 of 1920 failed: %v, want ejected", s)
	}
	r.wantEvents(t, "ejected: failure rate 50% (960 of 1920) over 10s at 03:00:06, until 03:00:36")
}

// TestConcurrentObservationsGiveTheLatencyMedianExactCounts has 8
// goroutines record fast and slow successes (and failures, which carry no
// latency) on one endpoint at once: with one success fewer than
// MinRequests it is not judged, although most of them are slow; the next
// success, a fast one, makes it judged, with the slow median of the
// merged histograms.
func TestConcurrentObservationsGiveTheLatencyMedianExactCounts(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{LatencyFactor: 3, MinRequests: 201, ConsecutiveFailures: 1 << 30})
	fast := endpoint.Outcome{Status: 200, Latency: time.Millisecond}
	slow := endpoint.Outcome{Status: 200, Latency: 201 * time.Millisecond}
	for i := range 3 {
		lists := make([][]endpoint.Outcome, 8)
		for g := range lists {
			for range 30 {
				lists[g] = append(lists[g], fast)
			}
		}
		r.observeFrom(lists, i)
	}
	// Endpoint 3: 99 fast and 101 slow successes, 40 failures, spread
	// over the goroutines.
	lists := make([][]endpoint.Outcome, 8)
	for g := range lists {
		for j := range 25 {
			o := slow
			if g*25+j < 99 {
				o = fast
			}
			lists[g] = append(lists[g], o)
			if j%5 == 0 {
				lists[g] = append(lists[g], endpoint.Outcome{Status: 503})
			}
		}
	}
	r.observeFrom(lists, 3)
	r.d.Tick(r.clk.Now())
	if s := r.state(t, 3); s != endpoint.Healthy {
		t.Fatalf("200 successes, min_requests 201: %v (%v), want not judged", s, r.log())
	}
	r.observe(3, 1, fast)
	r.d.Tick(r.clk.Now())
	if s := r.state(t, 3); s != endpoint.Ejected {
		t.Fatalf("201 successes, 101 of them slow: %v, want ejected", s)
	}
	r.wantEvents(t, "ejected: median latency 213ms > 3 x pool median 960µs over 10s at 03:00:00, until 03:00:30")
}

// TestQuietSuccessTakesNoEndpointLock pins the request path's common
// case: a success of a healthy endpoint with no run of failures records
// itself without the endpoint's mutex, which failures and decisions take.
func TestQuietSuccessTakesNoEndpointLock(t *testing.T) {
	r := newPassiveRig(t, 4, PassiveConfig{FailureRate: 0.5, MinRequests: 1, ConsecutiveFailures: 1 << 30})
	st := (*r.d.eps.Load())[r.eps[0]]
	st.mu.Lock()
	done := make(chan struct{})
	go func() {
		r.observe(0, 3, passiveOK)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a success of a quiet endpoint waited for the endpoint's mutex")
	}
	st.mu.Unlock()
	// They counted: one failure of 4 requests is below half, a second
	// makes half.
	r.observe(0, 1, passiveFail)
	if s := r.state(t, 0); s != endpoint.Healthy {
		t.Fatalf("1 failure of 4: %v, want healthy", s)
	}
	r.observe(0, 1, passiveFail)
	r.wantEvents(t) // 2 of 5 is below half
	r.observe(0, 1, passiveFail)
	r.wantEvents(t, "ejected: failure rate 50% (3 of 6) over 10s at 03:00:00, until 03:00:30")
}

// TestObserveOnTheRealClockDoesNotAllocate is TestObserveDoesNotAllocate
// for the common case on the real clock, whose time Observe reads as
// monotonic nanoseconds.
func TestObserveOnTheRealClockDoesNotAllocate(t *testing.T) {
	d, err := NewDetector(PassiveConfig{FailureRate: 0.5, LatencyFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	eps := []*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"}), endpoint.New(endpoint.Spec{Address: "10.0.0.2:80"})}
	d.Update(eps)
	i := 0
	if allocs := testing.AllocsPerRun(1000, func() {
		d.Observe(eps[i&1], passiveOK)
		i++
	}); allocs != 0 {
		t.Fatalf("Observe allocates %v times per success, want 0", allocs)
	}
}

// TestWindowTimelineIsUnixNanoseconds pins the offset of the windows'
// timeline: on a test's clock it is the time's Unix nanoseconds, so
// buckets start where they did when the window read the wall clock.
func TestWindowTimelineIsUnixNanoseconds(t *testing.T) {
	r := newPassiveRig(t, 1, PassiveConfig{})
	for _, step := range []time.Duration{0, time.Nanosecond, 1500 * time.Millisecond, 48 * time.Hour} {
		now := r.advance(step)
		if got, want := r.d.nanos(), now.UnixNano(); got != want {
			t.Fatalf("at %v: timeline %d, want Unix nanoseconds %d", now, got, want)
		}
		if got, want := timeline(now), now.UnixNano(); got != want {
			t.Fatalf("timeline(%v) = %d, want %d", now, got, want)
		}
	}
	real, err := NewDetector(PassiveConfig{})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got := real.nanos()
	after := time.Now()
	if got < timeline(before) || got > timeline(after) {
		t.Fatalf("real clock: timeline %d not between %d and %d", got, timeline(before), timeline(after))
	}
}

// TestOutlierWindowShardsAddUp feeds the same outcomes to a window of one
// shard and, each into a shard chosen at random, to a window of four, and
// checks that the sums and the median agree at every step, as buckets
// fill, age and are reused.
func TestOutlierWindowShardsAddUp(t *testing.T) {
	one := newOutlierWindow(time.Second, true, 1)
	four := newOutlierWindow(time.Second, true, 4)
	rng := rand.New(rand.NewPCG(1, 2))
	now := passiveT0.UnixNano()
	for step := range 5000 {
		now += rng.Int64N(int64(3 * time.Millisecond))
		failed := rng.IntN(4) == 0
		lat := time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
		one.add(&one.shards[0], now, failed, lat)
		four.add(&four.shards[rng.IntN(4)], now, failed, lat)
		r1, f1 := one.sums(now)
		r4, f4 := four.sums(now)
		m1, n1 := one.median(now)
		m4, n4 := four.median(now)
		if r1 != r4 || f1 != f4 || m1 != m4 || n1 != n4 {
			t.Fatalf("step %d: one shard: %d requests, %d failed, median %v of %d; four: %d, %d, %v of %d",
				step, r1, f1, m1, n1, r4, f4, m4, n4)
		}
	}
	if r, _ := one.sums(now); r < 100 {
		t.Fatalf("only %d requests in the window at the end: the test did not fill it", r)
	}
	four.reset()
	if r, f := four.sums(now); r != 0 || f != 0 {
		t.Fatalf("after reset: %d requests, %d failed", r, f)
	}
	if m, n := four.median(now); n != 0 {
		t.Fatalf("after reset: median %v of %d", m, n)
	}
}

// TestOutlierShardsArePadded pins the layout the Detector's doc prices: a
// shard is 320 bytes (on 64-bit machines), a cache line pair of which
// keeps the next shard's mutex and counts off its own.
func TestOutlierShardsArePadded(t *testing.T) {
	var s outlierShard
	data := unsafe.Offsetof(s.lat) + unsafe.Sizeof(s.lat)
	if size := unsafe.Sizeof(s); size < data+pshard.CacheLine {
		t.Fatalf("a shard is %d bytes, %d of them data: less than %d bytes apart from the next", size, data, pshard.CacheLine)
	}
	if size := unsafe.Sizeof(s); unsafe.Sizeof(uintptr(0)) == 8 && size != 320 {
		t.Fatalf("a shard is %d bytes; the Detector's doc says 320", size)
	}
}

// BenchmarkDetectorObserveParallel is the request path of the HTTP
// proxy's event loops, one per CPU: successes on a pool of two healthy
// endpoints from every P at once, on the real clock. "window" is the
// default configuration (consecutive failures and the failure-rate window
// off); "latency" also keeps the latency histograms (latency_factor set).
func BenchmarkDetectorObserveParallel(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  PassiveConfig
	}{
		{"window", PassiveConfig{}},
		{"latency", PassiveConfig{FailureRate: 0.5, LatencyFactor: 3}},
	} {
		b.Run(c.name, func(b *testing.B) {
			eps := []*endpoint.Endpoint{
				endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"}),
				endpoint.New(endpoint.Spec{Address: "10.0.0.2:80"}),
			}
			d, err := NewDetector(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			d.Update(eps)
			ok := endpoint.Outcome{Status: 200, Latency: 300 * time.Microsecond}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					d.Observe(eps[i&1], ok)
					i++
				}
			})
			for _, ep := range eps {
				if s, _ := d.State(ep); s != endpoint.Healthy {
					b.Fatalf("%s is %v after successes only", ep.Address(), s)
				}
			}
		})
	}
}

// TestOutcomeTimeIsItsAtOnTheRealClock: on the real clock an outcome that
// carries the reading that ended it (At) is placed by that reading, not
// by a second one; without At, or on a test's clock, the clock is read.
func TestOutcomeTimeIsItsAtOnTheRealClock(t *testing.T) {
	real, err := NewDetector(PassiveConfig{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	if got, want := real.outcomeNanos(endpoint.Outcome{At: endpoint.NanotimeOf(at)}), timeline(at); got != want {
		t.Fatalf("real clock, At an hour ago: timeline %d, want %d (At's)", got, want)
	}
	before := time.Now()
	got := real.outcomeNanos(endpoint.Outcome{})
	if got < timeline(before) || got > timeline(time.Now()) {
		t.Fatalf("real clock, no At: timeline %d, want now", got)
	}
	r := newPassiveRig(t, 1, PassiveConfig{})
	now := r.advance(time.Minute)
	if got, want := r.d.outcomeNanos(endpoint.Outcome{At: endpoint.NanotimeOf(at)}), now.UnixNano(); got != want {
		t.Fatalf("test clock: timeline %d, want the test clock's %d", got, want)
	}
}
