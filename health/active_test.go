package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*ActiveConfig)
		want string // the whole error; "" for valid
	}{
		{"defaults", func(*ActiveConfig) {}, ""},
		{"tcp", func(c *ActiveConfig) { c.Type = TypeTCP }, ""},
		{"grpc", func(c *ActiveConfig) { c.Type = TypeGRPC }, ""},
		{"no jitter", func(c *ActiveConfig) { c.Jitter = new(0.0) }, ""},
		{"negative interval", func(c *ActiveConfig) { c.Interval = -time.Second }, "interval: must not be negative, got -1s"},
		{"negative rise", func(c *ActiveConfig) { c.Rise = -1 }, "rise: must be at least 1, got -1"},
		{"negative fall", func(c *ActiveConfig) { c.Fall = -2 }, "fall: must be at least 1, got -2"},
		{"timeout equals interval", func(c *ActiveConfig) { c.Interval, c.Timeout = 5*time.Second, 5*time.Second }, "timeout: 5s must be below interval 5s"},
		{"unknown type", func(c *ActiveConfig) { c.Type = "icmp" }, `type: unknown check type "icmp" (want "http", "tcp" or "grpc")`},
		{"jitter 1", func(c *ActiveConfig) { c.Jitter = new(1.0) }, "jitter: must be in [0, 1), got 1"},
		{"max interval below interval", func(c *ActiveConfig) { c.MaxInterval = time.Second }, "max_interval: 1s must be at least interval 5s"},
		{"backoff below unhealthy interval", func(c *ActiveConfig) { c.UnhealthyInterval = 2 * time.Minute }, "max_backoff: 1m0s must be at least unhealthy_interval 2m0s"},
		{"bad status", func(c *ActiveConfig) { c.ExpectStatus = "2xx" }, `expect_status: status range "2xx": "2xx" is not a status code (100-599)`},
		{"fast interval", func(c *ActiveConfig) { c.Interval, c.Timeout = 500*time.Millisecond, 100*time.Millisecond }, "interval: 500ms is under 1s: probing this often needs allow_fast: true"},
		{"fast interval allowed", func(c *ActiveConfig) {
			c.Interval, c.Timeout, c.MaxInterval, c.AllowFast = 500*time.Millisecond, 100*time.Millisecond, 0, true
		}, ""},
		{"interval of 1s", func(c *ActiveConfig) { c.Interval, c.Timeout, c.MaxInterval = time.Second, 100*time.Millisecond, 0 }, ""},
		{"max interval without adaptive", func(c *ActiveConfig) { c.Adaptive, c.MaxInterval = new(false), time.Minute }, "max_interval: 1m0s is set but adaptive is false (the interval never stretches)"},
		{"every problem", func(c *ActiveConfig) { c.Type, c.Rise = "icmp", -1 }, `type: unknown check type "icmp" (want "http", "tcp" or "grpc")` + "\nrise: must be at least 1, got -1"},
	}
	for _, tt := range tests {
		for _, base := range []ActiveConfig{DefaultActiveConfig(), {}} {
			c := base
			tt.mod(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("%s (from %+v): Validate = %q, want %q", tt.name, base, got, tt.want)
			}
		}
	}
}

func TestZeroActiveConfigTakesTheDefaults(t *testing.T) {
	want := ActiveConfig{
		Type: TypeHTTP, Method: "GET", Path: "/", ExpectStatus: "200-399",
		Interval: 5 * time.Second, Timeout: 2 * time.Second, Rise: 2, Fall: 3, Jitter: new(0.1),
		MaxBackoff: 60 * time.Second, StretchAfter: 10, Adaptive: new(true), MaxInterval: 20 * time.Second,
	}
	if got := (ActiveConfig{}).WithDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("ActiveConfig{}.WithDefaults() =\n %+v, want\n %+v", got, want)
	}
	for interval, timeout := range map[time.Duration]time.Duration{
		time.Second: 500 * time.Millisecond, 2 * time.Second: time.Second, 3 * time.Second: 2 * time.Second,
	} {
		if got := (ActiveConfig{Interval: interval}).WithDefaults().Timeout; got != timeout {
			t.Errorf("default timeout with interval %v = %v, want %v (2s, or half of a shorter interval)", interval, got, timeout)
		}
	}
	if got := (ActiveConfig{Jitter: new(0.0)}).WithDefaults().Jitter; *got != 0 {
		t.Errorf("jitter 0 became %v, want it kept: 0 turns jitter off", *got)
	}
}

func TestTrackerRiseAndFall(t *testing.T) {
	boom := errors.New("status 500")
	tr := &tracker{rise: 2, fall: 3, kind: "HTTP", healthy: true}
	// P pass, F fail; a verdict change is shown after the result as !.
	steps := []struct {
		err    error
		change string
	}{
		{boom, ""}, {boom, ""}, {nil, ""}, // two failures, then a pass resets the count
		{boom, ""}, {boom, ""}, {boom, "unhealthy: 3 consecutive HTTP check failures: status 500"},
		{boom, ""},                       // already unhealthy: no repeat
		{nil, ""}, {boom, ""}, {nil, ""}, // a failure between passes resets rise
		{nil, "healthy: 2 consecutive HTTP check passes"},
		{nil, ""},
	}
	for i, s := range steps {
		changed, reason := tr.observe(s.err)
		got := ""
		if changed {
			got = map[bool]string{true: "healthy", false: "unhealthy"}[tr.healthy] + ": " + reason
		}
		if got != s.change {
			t.Errorf("step %d: change %q, want %q", i, got, s.change)
		}
	}
}

// noJitter is the defaults without jitter, allowing the short intervals
// that tests set.
func noJitter() ActiveConfig {
	c := DefaultActiveConfig()
	c.Jitter = new(0.0)
	c.AllowFast = true
	return c
}

// checkTimes runs the schedule over results from t0 and returns when each
// next check is due (checks are taken as instantaneous).
func checkTimes(s *schedule, t0 time.Time, results []bool, tr *tracker) []string {
	var out []string
	now := t0
	for _, passed := range results {
		var err error
		if !passed {
			err = errors.New("down")
		}
		tr.observe(err)
		now = now.Add(s.next(passed, tr.healthy))
		out = append(out, now.Format("15:04:05"))
	}
	return out
}

func TestScheduleBacksOffExponentiallyWhileUnhealthy(t *testing.T) {
	c := noJitter()
	c.Interval = time.Second
	c.Timeout = 500 * time.Millisecond
	c.UnhealthyInterval = 2 * time.Second
	c.MaxBackoff = 20 * time.Second
	s := newSchedule(c, nil)
	tr := &tracker{rise: 2, fall: 3, healthy: true}
	t0 := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	F, P := false, true
	got := checkTimes(s, t0, []bool{F, F, F, F, F, F, F, F, P, F, P, P, P}, tr)
	want := []string{
		"03:00:01", "03:00:02", // failures 1 and 2 while healthy: base interval
		"03:00:04",                         // failure 3 makes it unhealthy: unhealthy_interval
		"03:00:08", "03:00:16", "03:00:32", // 4s, 8s, 16s
		"03:00:52", "03:01:12", // capped at max_backoff 20s
		"03:01:14", // a pass while unhealthy: unhealthy_interval, backoff reset
		"03:01:16", // so the next failure starts the backoff afresh
		"03:01:18", // pass 1 of rise 2
		"03:01:19", // pass 2: healthy again, base interval
		"03:01:20",
	}
	if !slices.Equal(got, want) {
		t.Errorf("check times\n got %v\nwant %v", got, want)
	}
}

func TestScheduleAdaptiveIntervalStretchesAndSnapsBack(t *testing.T) {
	c := noJitter()
	c.Interval = time.Second
	c.Timeout = 500 * time.Millisecond
	c.MaxInterval = 8 * time.Second
	c.StretchAfter = 2
	s := newSchedule(c, nil)
	var waits []time.Duration
	for range 9 {
		waits = append(waits, s.next(true, true))
	}
	want := []time.Duration{1, 2, 2, 4, 4, 8, 8, 8, 8}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits while passing: got %v, want %v (doubling every 2 passes up to max_interval)", waits, want)
	}
	if got := s.next(false, true); got != time.Second {
		t.Errorf("first failure: wait %v, want interval 1s", got)
	}
	if got := s.next(true, true); got != time.Second {
		t.Errorf("pass after the failure: wait %v, want 1s (the stretch starts over)", got)
	}
	for range 6 {
		s.next(true, true)
	}
	s.nudge()
	if got := s.next(true, true); got != time.Second {
		t.Errorf("pass after Nudge: wait %v, want interval 1s", got)
	}
}

func TestScheduleAdaptiveIntervalOnByDefaultUpTo4xInterval(t *testing.T) {
	c := ActiveConfig{Jitter: new(0.0)}.WithDefaults()
	s := newSchedule(c, nil)
	var waits []time.Duration
	for range 40 {
		waits = append(waits, s.next(true, true))
	}
	// Every 10 passes the wait doubles: 5s, 10s, 20s, and no further.
	for i, w := range waits {
		want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 20 * time.Second}[i/10]
		if i%10 == 9 && i/10 < 2 {
			want *= 2 // the 10th pass stretches the wait it returns
		}
		if w != want {
			t.Fatalf("pass %d: wait %v, want %v (waits %v)", i+1, w, want, waits)
		}
	}
}

func TestScheduleAdaptiveFalseKeepsTheIntervalFixed(t *testing.T) {
	c := noJitter()
	c.Adaptive = new(false)
	c.MaxInterval = 0
	s := newSchedule(c.WithDefaults(), nil)
	for i := range 100 {
		if got := s.next(true, true); got != 5*time.Second {
			t.Fatalf("pass %d: wait %v, want the fixed 5s interval", i, got)
		}
	}
}

func TestDefaultMaxInterval(t *testing.T) {
	for interval, want := range map[time.Duration]time.Duration{
		time.Second: 4 * time.Second, 5 * time.Second: 20 * time.Second, 15 * time.Second: time.Minute,
		30 * time.Second: time.Minute, 2 * time.Minute: 2 * time.Minute,
	} {
		if got := (ActiveConfig{Interval: interval}).WithDefaults().MaxInterval; got != want {
			t.Errorf("default max_interval with interval %v = %v, want %v (4x, at most 1m, at least the interval)", interval, got, want)
		}
	}
	if got := (ActiveConfig{Interval: 5 * time.Second, Adaptive: new(false)}).WithDefaults().MaxInterval; got != 5*time.Second {
		t.Errorf("max_interval with adaptive false = %v, want the interval 5s", got)
	}
}

func TestJitterSpreadsFirstChecks(t *testing.T) {
	c := DefaultActiveConfig() // interval 5s, jitter 0.1: a 500ms window
	r := rand.New(rand.NewPCG(1, 2))
	window := time.Duration(*c.Jitter * float64(c.Interval))
	const n, buckets = 1000, 10
	var count [buckets]int
	lo, hi := window, time.Duration(0)
	for range n {
		d := newSchedule(c, r.Float64).first()
		if d < 0 || d >= window {
			t.Fatalf("first check at %v, outside the jitter window [0, %v)", d, window)
		}
		count[int(d*buckets/window)]++
		lo, hi = min(lo, d), max(hi, d)
	}
	for i, k := range count {
		if k > 2*n/buckets {
			t.Errorf("bucket %d of the jitter window holds %d first checks, more than twice its share %d: %v", i, k, n/buckets, count)
		}
	}
	if hi-lo < window*8/10 {
		t.Errorf("first checks span %v..%v, less than 80%% of the %v window", lo, hi, window)
	}
}

func TestJitterVariesEachWaitWithinBounds(t *testing.T) {
	c := ActiveConfig{Adaptive: new(false)}.WithDefaults() // a fixed base to jitter
	s := newSchedule(c, rand.New(rand.NewPCG(3, 4)).Float64)
	seen := map[time.Duration]bool{}
	for range 100 {
		d := s.next(true, true)
		if d < 4750*time.Millisecond || d > 5250*time.Millisecond {
			t.Fatalf("wait %v outside 5s ±5%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct waits in 100: not jittered", len(seen))
	}
}

// nextCheck waits until the Monitor (of one endpoint) has armed its timer,
// advances clk to it so that the next check begins, and returns the wait.
func nextCheck(t *testing.T, clk *clock.Fake) time.Duration {
	t.Helper()
	d := armed(t, clk)
	clk.Advance(d)
	return d
}

// armed waits until the Monitor (of one endpoint) has armed its timer and
// returns its wait.
func armed(t *testing.T, clk *clock.Fake) time.Duration {
	t.Helper()
	within(t, clk.Waiting(1), 5*time.Second, "armed check timer")
	p := clk.Pending()
	if len(p) != 1 {
		t.Fatalf("timers armed: %v, want the one of the endpoint", p)
	}
	return p[0]
}

type activeVerdict struct {
	addr    string
	healthy bool
	reason  string
	at      time.Time
}

func collect(ch chan<- activeVerdict) OnChangeFunc {
	return func(ep *endpoint.Endpoint, healthy bool, reason string, now time.Time) {
		ch <- activeVerdict{ep.Address(), healthy, reason, now}
	}
}

func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
		panic("unreachable")
	}
}

func TestMonitorReportsVerdictsOnItsSchedule(t *testing.T) {
	c := noJitter()
	c.Interval = time.Second
	c.Timeout = 500 * time.Millisecond
	results := make(chan error)
	// It honours ctx, as a Checker must: Close cancels the check that
	// began after the last result and waits for it.
	checker := CheckerFunc(func(ctx context.Context, addr string) error {
		select {
		case err := <-results:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	verdicts := make(chan activeVerdict, 4)
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	m, err := NewMonitor(c, collect(verdicts), WithChecker(checker), WithLogger(quiet), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"})})
	m.Start(context.Background())
	defer m.Close()

	// Each check begins when the clock reaches the wait the Monitor armed.
	var waits []time.Duration
	down := errors.New("connection refused")
	for _, r := range []error{down, down, down, nil, nil} {
		waits = append(waits, nextCheck(t, clk))
		results <- r
	}
	v := within(t, verdicts, 5*time.Second, "unhealthy verdict")
	if v.healthy || v.reason != "3 consecutive health check failures: connection refused" || v.at.Format("15:04:05") != "03:00:02" {
		t.Errorf("verdict %+v, want unhealthy at 03:00:02 after 3 failures", v)
	}
	v = within(t, verdicts, 5*time.Second, "healthy verdict")
	if !v.healthy || v.reason != "2 consecutive health check passes" || v.at.Format("15:04:05") != "03:00:04" {
		t.Errorf("verdict %+v, want healthy at 03:00:04 after 2 passes", v)
	}
	waits = append(waits, armed(t, clk)) // the wait after the fifth check
	// The first check at once, then 1s: unhealthy_interval defaults to
	// interval, and the first failure while unhealthy waits just that.
	want := []time.Duration{0, time.Second, time.Second, time.Second, time.Second, time.Second}
	if !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
}

func TestMonitorHungCheckDoesNotDelayOthers(t *testing.T) {
	fastHits := make(chan struct{}, 100)
	fast := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case fastHits <- struct{}{}:
		default:
		}
	})
	// The worst case: a check that ignores its context and hangs until the
	// test ends. Checking endpoints one after another would never reach
	// the fast one.
	const hung = "10.0.0.1:80"
	release := make(chan struct{})
	var http HTTPCheck
	checker := CheckerFunc(func(ctx context.Context, addr string) error {
		if addr == hung {
			<-release
			return nil
		}
		return http.Check(ctx, addr)
	})
	c := noJitter()
	c.Interval = 20 * time.Millisecond
	c.Timeout = 10 * time.Millisecond
	m, err := NewMonitor(c, nil, WithChecker(checker), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer close(release) // runs first: Close waits for the hung check
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: hung}), endpoint.New(endpoint.Spec{Address: fast})})
	m.Start(context.Background())
	for i := range 3 {
		within(t, fastHits, 2*time.Second, fmt.Sprintf("check %d of the fast endpoint while the other hangs", i+1))
	}
}

func TestMonitorTimesOutAHungServer(t *testing.T) {
	release := make(chan struct{})
	hung := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	c := noJitter()
	c.Interval = 100 * time.Millisecond
	c.Timeout = 80 * time.Millisecond
	c.Fall = 1
	verdicts := make(chan activeVerdict, 4)
	m, err := NewMonitor(c, collect(verdicts), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: hung})})
	m.Start(context.Background())
	defer m.Close()
	v := within(t, verdicts, 2*time.Second, "verdict on the hung endpoint")
	if v.healthy || !strings.Contains(v.reason, "1 consecutive HTTP check failures: timeout after 80ms") {
		t.Errorf("verdict %+v, want unhealthy by timeout", v)
	}
}

func TestMonitorChecksAReplacedEndpointAfresh(t *testing.T) {
	c := noJitter()
	c.Interval = 20 * time.Millisecond
	c.Timeout = 10 * time.Millisecond
	checked := make(chan struct{}, 1000)
	checker := CheckerFunc(func(context.Context, string) error {
		select {
		case checked <- struct{}{}:
		default:
		}
		return errors.New("down")
	})
	verdicts := make(chan activeVerdict, 4)
	c.Fall = 1
	m, err := NewMonitor(c, collect(verdicts), WithChecker(checker), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	old := endpoint.New(endpoint.Spec{Address: "10.0.0.1:80", Weight: 1})
	m.Sync([]*endpoint.Endpoint{old})
	m.Start(context.Background())
	within(t, verdicts, 2*time.Second, "verdict on the first endpoint")
	// Same address, new spec: Pool.Update made a fresh Endpoint, which
	// starts healthy, so it needs its own verdict.
	replaced := endpoint.New(endpoint.Spec{Address: "10.0.0.1:80", Weight: 5})
	m.Sync([]*endpoint.Endpoint{replaced})
	v := within(t, verdicts, 2*time.Second, "verdict on the replaced endpoint")
	if v.healthy {
		t.Errorf("verdict %+v, want unhealthy", v)
	}
	waitRunning(t, m, 1)
}

func TestMonitorNudgeBringsAStretchedCheckForward(t *testing.T) {
	c := noJitter()
	c.Interval = 50 * time.Millisecond
	c.Timeout = 40 * time.Millisecond
	c.MaxInterval = time.Hour
	c.StretchAfter = 1
	t0 := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	checks := make(chan time.Duration, 100)
	checker := CheckerFunc(func(context.Context, string) error { checks <- clk.Now().Sub(t0); return nil })
	m, err := NewMonitor(c, nil, WithChecker(checker), WithLogger(quiet), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"})})
	m.Start(context.Background())
	defer m.Close()

	// Waits double from 100ms: checks at 0, 100, 300, 700ms; the next is due
	// 800ms after the fourth.
	for i, want := range []time.Duration{0, 100, 300, 700} {
		nextCheck(t, clk)
		if at := within(t, checks, 5*time.Second, fmt.Sprintf("check %d", i+1)); at != want*time.Millisecond {
			t.Fatalf("check %d at %v, want %v", i+1, at, want*time.Millisecond)
		}
	}
	if d := armed(t, clk); d != 800*time.Millisecond {
		t.Fatalf("wait after four passes %v, want the stretched 800ms", d)
	}
	m.Nudge("10.0.0.1:80")
	testutil.WaitFor(t, 5*time.Second, "the nudged check to be rescheduled", func() bool {
		p := clk.Pending()
		return len(p) == 1 && p[0] == c.Interval
	})
	clk.Advance(c.Interval)
	if at := within(t, checks, 5*time.Second, "check after Nudge"); at != 750*time.Millisecond {
		t.Errorf("check after Nudge at %v, want 750ms: the 50ms interval, not the stretched 800ms", at)
	}
}

func TestMonitorSyncStopsRemovedEndpoints(t *testing.T) {
	c := noJitter()
	c.Interval = 20 * time.Millisecond
	c.Timeout = 10 * time.Millisecond
	checked := make(chan string, 1000)
	checker := CheckerFunc(func(_ context.Context, addr string) error {
		select {
		case checked <- addr:
		default:
		}
		return nil
	})
	m, err := NewMonitor(c, nil, WithChecker(checker), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eps := []*endpoint.Endpoint{
		endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"}),
		endpoint.New(endpoint.Spec{Address: "10.0.0.2:80"}),
		endpoint.New(endpoint.Spec{Address: "10.0.0.3:80"}),
	}
	m.Sync(eps)
	if n := m.running.Load(); n != 0 {
		t.Fatalf("%d goroutines before Start, want 0", n)
	}
	m.Start(context.Background())
	waitRunning(t, m, 3)
	m.Sync(eps[:1])
	waitRunning(t, m, 1)
	m.Sync(nil)
	waitRunning(t, m, 0)
	for len(checked) > 0 { // drain what was checked before the stop
		<-checked
	}
	m.Sync(eps[1:2])
	if addr := within(t, checked, 2*time.Second, "check of the re-added endpoint"); addr != "10.0.0.2:80" {
		t.Errorf("checked %s, want only the re-added 10.0.0.2:80", addr)
	}
	m.Close()
	waitRunning(t, m, 0)
}

func waitRunning(t *testing.T, m *Monitor, want int64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for m.running.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d check goroutines running, want %d", m.running.Load(), want)
		}
		<-tick.C
	}
}

// TestMonitorReportsEveryCheckWithItsDuration pins WithOnCheck: it hears
// of every check, passes and failures alike, with how long the check took,
// while the verdict callback hears only of changes (none here: one failure
// is below fall).
func TestMonitorReportsEveryCheckWithItsDuration(t *testing.T) {
	c := noJitter()
	c.Interval = time.Second
	c.Timeout = 500 * time.Millisecond
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	results := make(chan error)
	checker := CheckerFunc(func(ctx context.Context, addr string) error {
		err := <-results
		clk.Advance(250 * time.Millisecond) // the check takes 250ms
		return err
	})
	type check struct {
		addr string
		err  error
		took time.Duration
	}
	checks := make(chan check, 4)
	verdicts := make(chan activeVerdict, 4)
	m, err := NewMonitor(c, collect(verdicts), WithChecker(checker), WithLogger(quiet), withClock(clk),
		WithOnCheck(func(ep *endpoint.Endpoint, err error, took time.Duration) { checks <- check{ep.Address(), err, took} }))
	if err != nil {
		t.Fatal(err)
	}
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"})})
	m.Start(context.Background())
	defer m.Close()

	down := errors.New("connection refused")
	for i, r := range []error{nil, down, nil} {
		nextCheck(t, clk)
		results <- r
		got := within(t, checks, 5*time.Second, "check report")
		if got.addr != "10.0.0.1:80" || got.err != r || got.took != 250*time.Millisecond {
			t.Errorf("check %d reported %+v, want %v after 250ms", i, got, r)
		}
	}
	select {
	case v := <-verdicts:
		t.Errorf("verdict %+v after one failure below fall", v)
	default:
	}
}
