package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
)

// harness is a Discovery over a fakeRegistry with every seam in the test's
// hands: the clock (a clock.Fake, which also holds the empty-grace timer),
// the backoff sleeps (recorded, not slept) and a signal per handled
// registry outcome.
type harness struct {
	reg     *fakeRegistry
	clock   *clock.Fake
	d       *Discovery
	handled chan struct{}
	sleeps  chan time.Duration
	logs    *logBuffer
}

func newHarness(t *testing.T, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{
		reg:     newFakeRegistry(),
		clock:   clock.NewFake(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)),
		handled: make(chan struct{}, 1024),
		sleeps:  make(chan time.Duration, 1024),
		logs:    &logBuffer{},
	}
	opts := Options{
		Registry: "test",
		Logger:   h.logs.logger(),
		clock:    h.clock,
		sleep: func(ctx context.Context, d time.Duration) error {
			h.sleeps <- d
			return ctx.Err()
		},
		handled: func() { h.handled <- struct{}{} },
	}
	if mod != nil {
		mod(&opts)
	}
	d, err := New(h.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	t.Cleanup(d.Close)
	return h
}

// step hands the watch of service one answer and waits until its loop has
// dealt with it.
func (h *harness) step(t *testing.T, service string, a answer) {
	t.Helper()
	h.reg.send(t, service, a)
	h.waitHandled(t)
}

func (h *harness) waitHandled(t *testing.T) {
	t.Helper()
	select {
	case <-h.handled:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch loop did not handle the answer within 5s")
	}
}

func (h *harness) status(t *testing.T, service string) ServiceStatus {
	t.Helper()
	for _, s := range h.d.Status() {
		if s.Service == service {
			return s
		}
	}
	t.Fatalf("no status for %q in %+v", service, h.d.Status())
	return ServiceStatus{}
}

func ids(insts []registry.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

func TestFirstFetchFillsTheViewAndReady(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders", PassingOnly: true})
	defer v.Close()
	if s := v.Snapshot(); s.Version != 0 {
		t.Fatalf("snapshot before any answer: %+v, want the zero Snapshot", s)
	}
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 9001), inst("orders", "b", 9002)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := v.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	s := v.Snapshot()
	if got := ids(s.Instances); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("instances %v, want [a b]", got)
	}
	if s.Version != 1 || s.Stale || s.FromCache || s.LastError != "" || !s.UpdatedAt.Equal(h.clock.Now()) {
		t.Fatalf("snapshot %+v: want version 1, fresh, not from cache, updated at %v", s, h.clock.Now())
	}
	if n := h.reg.watchs.Load(); n != 1 {
		t.Fatalf("Watch called %d times, want 1", n)
	}
}

func TestSubscribersGetEveryChangeInOrder(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	r1, cancel1 := record(v)
	defer cancel1()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	// A subscriber that comes later gets the current snapshot at once.
	r2, cancel2 := record(v)
	defer cancel2()
	if s := r2.next(t); s.Version != 1 {
		t.Fatalf("late subscriber first got v%d, want the current v1", s.Version)
	}
	sets := [][]string{{"a", "b"}, {"b"}, {"b", "c", "d"}, {"d"}}
	for _, set := range sets {
		var insts []registry.Instance
		for i, id := range set {
			insts = append(insts, inst("orders", id, 100+i))
		}
		h.step(t, "orders", answer{insts: insts})
	}
	want := append([][]string{{"a"}}, sets...)
	for i, w := range want {
		s := r1.next(t)
		if s.Version != uint64(i+1) || !slices.Equal(ids(s.Instances), w) {
			t.Fatalf("subscriber 1, snapshot %d: v%d %v, want v%d %v", i, s.Version, ids(s.Instances), i+1, w)
		}
		if i == 0 {
			continue
		}
		s = r2.next(t)
		if s.Version != uint64(i+1) || !slices.Equal(ids(s.Instances), w) {
			t.Fatalf("subscriber 2, snapshot %d: v%d %v, want v%d %v", i, s.Version, ids(s.Instances), i+1, w)
		}
	}
	// The same set again is no change: nothing is published.
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "d", 100)}})
	r1.none(t)
	if s := v.Snapshot(); s.Version != 5 {
		t.Fatalf("after an unchanged answer the view is v%d, want v5", s.Version)
	}
	// A cancelled subscription hears no more.
	cancel2()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "e", 100)}})
	if s := r1.next(t); s.Version != 6 {
		t.Fatalf("subscriber 1 got v%d, want v6", s.Version)
	}
	r2.none(t)
}

func TestRegistryErrorKeepsTheLastSetAndMarksItStale(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	h := newHarness(t, func(o *Options) { o.Metrics = m })
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	rec, cancel := record(v)
	defer cancel()
	set := []registry.Instance{inst("orders", "a", 1), inst("orders", "b", 2)}
	h.step(t, "orders", answer{insts: set})
	good := rec.next(t)
	answeredAt := h.clock.Now()

	h.clock.Advance(10 * time.Second)
	h.step(t, "orders", answer{err: errors.New("connection refused")})
	<-h.sleeps
	s := rec.next(t)
	if !s.Stale || s.LastError != "connection refused" || s.Version != 2 || !slices.Equal(ids(s.Instances), []string{"a", "b"}) {
		t.Fatalf("after an error: %+v; want v2, stale, the last set [a b], LastError", s)
	}
	if !s.UpdatedAt.Equal(answeredAt) {
		t.Fatalf("UpdatedAt %v, want the last good answer %v", s.UpdatedAt, answeredAt)
	}
	if &s.Instances[0] != &good.Instances[0] {
		t.Fatal("the stale snapshot copied the instances; it should share the last good slice")
	}

	// More errors: counted, but no new snapshot (nothing a pool needs).
	h.clock.Advance(5 * time.Second)
	h.step(t, "orders", answer{err: errors.New("i/o timeout")})
	<-h.sleeps
	rec.none(t)
	st := h.status(t, "orders")
	if st.Errors != 2 || st.LastError != "i/o timeout" || !st.Stale || st.Instances != 2 {
		t.Fatalf("status %+v: want 2 errors, last error i/o timeout, stale, 2 instances", st)
	}
	if st.AgeSeconds != 5 {
		t.Fatalf("age %vs, want 5s (since the first failure)", st.AgeSeconds)
	}
	h.clock.Advance(20 * time.Second)
	if st := h.status(t, "orders"); st.AgeSeconds != 25 {
		t.Fatalf("age %vs after 20s more, want 25s", st.AgeSeconds)
	}
	for name, want := range map[string]float64{
		"switchboard_discovery_errors_total": 2,
		"switchboard_discovery_age_seconds":  25,
		"switchboard_discovery_instances":    2,
		"switchboard_discovery_stale":        1,
	} {
		if got := gathered(t, reg, name, "test", "orders"); got != want {
			t.Errorf("%s{registry=test,service=orders} = %v, want %v", name, got, want)
		}
	}
	if n := h.logs.count("registry error; serving the last known instances"); n != 1 {
		t.Fatalf("the outage was logged %d times at warn, want once:\n%s", n, h.logs)
	}
}

func TestRecoveryClearsStale(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	rec, cancel := record(v)
	defer cancel()
	set := []registry.Instance{inst("orders", "a", 1)}
	h.step(t, "orders", answer{insts: set})
	rec.next(t)
	h.step(t, "orders", answer{err: errors.New("connection refused")})
	<-h.sleeps
	if s := rec.next(t); !s.Stale {
		t.Fatalf("after an error: %+v, want stale", s)
	}
	h.clock.Advance(time.Minute)
	// The watcher resumes and the registry gives the same set: the view is
	// fresh again, which is a change worth publishing.
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	s := rec.next(t)
	if s.Stale || s.LastError != "" || s.Version != 3 || !slices.Equal(ids(s.Instances), []string{"a"}) || !s.UpdatedAt.Equal(h.clock.Now()) {
		t.Fatalf("after recovery: %+v; want v3, fresh, [a], updated now", s)
	}
	st := h.status(t, "orders")
	if st.Stale || st.AgeSeconds != 0 || st.LastError != "connection refused" || st.Errors != 1 {
		t.Fatalf("status after recovery %+v: want fresh, age 0, the last error kept for the record", st)
	}
	if h.logs.count("registry answers again") != 1 {
		t.Fatalf("recovery not logged:\n%s", h.logs)
	}
}

func TestBackoffGrowsExponentiallyUpToTheMaximumAndResets(t *testing.T) {
	// The jitter source returns its maximum, so each sleep is the ceiling.
	h := newHarness(t, func(o *Options) {
		o.MinBackoff = 100 * time.Millisecond
		o.MaxBackoff = 2 * time.Second
		o.rnd = func(n int64) int64 { return n - 1 }
	})
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000, 2000}
	for i, w := range want {
		h.reg.send(t, "orders", answer{err: errors.New("down")})
		if got := <-h.sleeps; got != w*time.Millisecond && !(w == 2000 && got == 2*time.Second) {
			t.Fatalf("sleep after failure %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
		h.waitHandled(t)
	}
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	h.reg.send(t, "orders", answer{err: errors.New("down")})
	if got := <-h.sleeps; got != 100*time.Millisecond {
		t.Fatalf("first sleep after a success: %v, want 100ms again", got)
	}
	h.waitHandled(t)
	select {
	case d := <-h.sleeps:
		t.Fatalf("a sleep (%v) without a failure", d)
	default:
	}
}

func TestBackoffIsFullJitterUnderTheCeiling(t *testing.T) {
	o := Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 30 * time.Second}.withDefaults()
	for n := range 80 {
		ceil := 100 * time.Millisecond
		for range n {
			ceil = min(2*ceil, 30*time.Second)
		}
		lo, hi := ceil, time.Duration(0)
		for range 200 {
			d := o.backoff(n)
			if d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, outside [0, %v]", n, d, ceil)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter spreads over the whole range, not a band at the top.
		if lo > ceil/4 || hi < ceil*3/4 {
			t.Fatalf("backoff(%d) over 200 draws spans [%v, %v] of [0, %v]: not full jitter", n, lo, hi, ceil)
		}
	}
}

func TestEmptyGuardKeepsThePreviousSetDuringGrace(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.EmptyGrace = 30 * time.Second })
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	rec, cancel := record(v)
	defer cancel()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1), inst("orders", "b", 2)}})
	rec.next(t)

	h.step(t, "orders", answer{insts: []registry.Instance{}})
	if p := h.clock.Pending(); !slices.Equal(p, []time.Duration{30 * time.Second}) {
		t.Fatalf("timers %v, want the 30s grace timer", p)
	}
	s := rec.next(t)
	if !s.Stale || s.Version != 2 || !slices.Equal(ids(s.Instances), []string{"a", "b"}) {
		t.Fatalf("during grace: %+v; want v2, stale, the previous [a b]", s)
	}
	st := h.status(t, "orders")
	if !st.EmptyGuard || st.EmptyGraceUntil == nil || !st.EmptyGraceUntil.Equal(h.clock.Now().Add(30*time.Second)) {
		t.Fatalf("status during grace %+v: want the empty guard until now+30s", st)
	}
	// Another empty answer during grace changes nothing and logs nothing.
	h.step(t, "orders", answer{insts: nil})
	rec.none(t)
	if n := h.logs.count("keeping the previous ones"); n != 1 {
		t.Fatalf("the empty guard was logged %d times, want once:\n%s", n, h.logs)
	}

	h.clock.Advance(30 * time.Second)
	h.waitHandled(t)
	s = rec.next(t)
	if s.Stale || s.Version != 3 || len(s.Instances) != 0 || s.Instances == nil {
		t.Fatalf("after grace: %+v; want v3, fresh, an empty non-nil set", s)
	}
	if st := h.status(t, "orders"); st.EmptyGuard || st.Instances != 0 {
		t.Fatalf("status after grace %+v: want no guard, 0 instances", st)
	}
	if h.logs.count("the empty grace is over") != 1 {
		t.Fatalf("the end of the grace was not logged:\n%s", h.logs)
	}
	// Empty again: nothing to guard, no new timer.
	h.step(t, "orders", answer{insts: []registry.Instance{}})
	rec.none(t)
	if p := h.clock.Pending(); len(p) != 0 {
		t.Fatalf("timers %v: a grace timer for a service that already had no instances", p)
	}
}

func TestEmptyGuardEndsWithANonEmptyAnswer(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	rec, cancel := record(v)
	defer cancel()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	rec.next(t)
	h.step(t, "orders", answer{insts: []registry.Instance{}})
	if p := h.clock.Pending(); !slices.Equal(p, []time.Duration{DefaultEmptyGrace}) {
		t.Fatalf("timers %v, want the default grace %v", p, DefaultEmptyGrace)
	}
	rec.next(t)
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "b", 2)}})
	s := rec.next(t)
	if s.Stale || !slices.Equal(ids(s.Instances), []string{"b"}) {
		t.Fatalf("non-empty answer during grace: %+v; want fresh [b]", s)
	}
	if p := h.clock.Pending(); len(p) != 0 {
		t.Fatalf("timers %v: the grace timer was not stopped", p)
	}
	if st := h.status(t, "orders"); st.EmptyGuard {
		t.Fatalf("status %+v: the guard should be over", st)
	}
}

func TestNegativeEmptyGraceDisablesTheGuard(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.EmptyGrace = -1 })
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	rec, cancel := record(v)
	defer cancel()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	rec.next(t)
	h.step(t, "orders", answer{insts: []registry.Instance{}})
	if s := rec.next(t); s.Stale || len(s.Instances) != 0 {
		t.Fatalf("with the guard off: %+v, want fresh and empty at once", s)
	}
}

func TestLastViewCloseStopsTheLoop(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHarness(t, nil)
	q := registry.Query{Service: "orders", Tags: []string{"v2"}}
	v1 := h.d.Watch(q)
	v2 := h.d.Watch(q)
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	if v1.w != v2.w || h.reg.watchs.Load() != 1 {
		t.Fatalf("two views of one query: %d registry watches, want 1 shared", h.reg.watchs.Load())
	}
	w := v1.w
	v1.Close()
	v1.Close() // idempotent: must not drop v2's reference
	select {
	case <-w.done:
		t.Fatal("the loop stopped while a view was still open")
	default:
	}
	if s := v2.Snapshot(); len(s.Instances) != 1 {
		t.Fatalf("remaining view: %+v", s)
	}
	v2.Close()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not stop within 5s of the last view closing")
	}
	if h.reg.stops.Load() != 1 {
		t.Fatalf("registry watcher stopped %d times, want 1", h.reg.stops.Load())
	}
	if st := h.d.Status(); len(st) != 0 {
		t.Fatalf("status after the last view closed: %+v, want none", st)
	}
	testutil.WaitFor(t, 5*time.Second, "goroutines back to the baseline (loop and pump ended)", func() bool {
		return runtime.NumGoroutine() <= base
	})
	// A new view starts a new loop.
	v3 := h.d.Watch(q)
	defer v3.Close()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "b", 1)}})
	if h.reg.watchs.Load() != 2 || v3.Snapshot().Version != 1 {
		t.Fatalf("new view after the last closed: %d watches, %+v", h.reg.watchs.Load(), v3.Snapshot())
	}
}

func TestReadyReportsTheRegistryErrorWhenItTimesOut(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	h.step(t, "orders", answer{err: errors.New("connection refused")})
	<-h.sleeps
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := v.Ready(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Ready: %v; want the deadline and the registry's error", err)
	}
	if s := v.Snapshot(); s.Version != 0 {
		t.Fatalf("an error with nothing known published %+v; want no snapshot", s)
	}
}

func TestViewsOfAClosedDiscovery(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	h.d.Close()
	if s := v.Snapshot(); len(s.Instances) != 1 {
		t.Fatalf("a view keeps its last snapshot after Close: %+v", s)
	}
	v.Close()
	late := h.d.Watch(registry.Query{Service: "orders"})
	if err := late.Ready(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready on a view of a closed Discovery: %v, want ErrClosed", err)
	}
	late.Subscribe(func(Snapshot) { t.Error("a view of a closed Discovery delivered a snapshot") })()
	late.Close()
}

func TestUnrelatedViewsAreIndependent(t *testing.T) {
	h := newHarness(t, nil)
	a := h.d.Watch(registry.Query{Service: "a"})
	defer a.Close()
	b := h.d.Watch(registry.Query{Service: "b"})
	defer b.Close()
	ra, ca := record(a)
	defer ca()
	rb, cb := record(b)
	defer cb()
	h.step(t, "a", answer{insts: []registry.Instance{inst("a", "a1", 1)}})
	h.step(t, "b", answer{insts: []registry.Instance{inst("b", "b1", 1)}})
	ra.next(t)
	rb.next(t)
	h.step(t, "a", answer{insts: []registry.Instance{inst("a", "a2", 1)}})
	ra.next(t)
	rb.none(t)
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{MinBackoff: -time.Second}, "min_backoff"},
		{Options{MaxBackoff: -time.Second}, "max_backoff"},
		{Options{MinBackoff: time.Minute}, "min_backoff: 1m0s is above max_backoff 30s"},
	} {
		if _, err := New(newFakeRegistry(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", tc.opts, err, tc.want)
		}
	}
	if _, err := New(nil, Options{}); err == nil || !strings.Contains(err.Error(), "registry") {
		t.Errorf("New(nil): %v, want an error naming the registry", err)
	}
}

func TestStatusJSONUsesSnakeCase(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders", Tags: []string{"v2"}, PassingOnly: true})
	defer v.Close()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	h.step(t, "orders", answer{err: errors.New("boom")})
	<-h.sleeps
	data, err := json.Marshal(h.d.Status())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("status %s: want one entry", data)
	}
	for _, k := range []string{"registry", "service", "tags", "passing_only", "instances", "stale", "age_seconds", "last_error", "last_error_at", "errors", "from_cache", "empty_guard", "version", "updated_at"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("status JSON %s has no %q", data, k)
		}
	}
	if got[0]["registry"] != "test" || got[0]["service"] != "orders" || got[0]["last_error"] != "boom" || got[0]["stale"] != true {
		t.Errorf("status JSON %s", data)
	}
}

// gathered is the value of the series name{registry,service} in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, registryName, service string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["registry"] != registryName || labels["service"] != service {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s{registry=%q,service=%q}", name, registryName, service)
	return 0
}

func TestSpecsCarryAddressWeightZoneAndMeta(t *testing.T) {
	meta := map[string]string{"zone": "eu-1", "version": "2"}
	got := Specs([]registry.Instance{
		{ID: "a", Service: "s", Address: "::1", Port: 80, Weight: 0, Zone: "eu-1", Meta: meta},
		{ID: "b", Service: "s", Address: "10.0.0.2", Port: 8080, Weight: 5},
	})
	if len(got) != 2 || got[0].Address != "[::1]:80" || got[0].Weight != 1 || got[0].Zone != "eu-1" || got[0].Meta["version"] != "2" ||
		got[1].Address != "10.0.0.2:8080" || got[1].Weight != 5 {
		t.Fatalf("Specs: %+v", got)
	}
}

func TestASubscriberMayCancelAndCloseFromItsCallback(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	other := h.d.Watch(registry.Query{Service: "orders"})
	defer other.Close()
	calls := make(chan uint64, 16)
	var cancel func()
	cancel = v.Subscribe(func(s Snapshot) {
		calls <- s.Version
		if s.Version == 1 {
			cancel()
			v.Close()
		}
	})
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	if got := <-calls; got != 1 {
		t.Fatalf("first call v%d", got)
	}
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "b", 1)}})
	if s := other.Snapshot(); s.Version != 2 {
		t.Fatalf("the other view is at v%d, want v2 (the loop must go on)", s.Version)
	}
	select {
	case got := <-calls:
		t.Fatalf("a cancelled subscriber got v%d", got)
	default:
	}
}

// Subscribing while the loop publishes must give each subscriber every
// version from its first one on, each once, in order.
func TestSubscribeDuringPublicationsMissesAndRepeatsNothing(t *testing.T) {
	h := newHarness(t, nil)
	v := h.d.Watch(registry.Query{Service: "orders"})
	defer v.Close()
	h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 0)}})
	const updates = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= updates; i++ {
			h.reg.ch("orders") <- answer{insts: []registry.Instance{inst("orders", "a", i)}}
			<-h.handled
		}
	}()
	type seen struct{ versions []uint64 }
	var subs []*seen
	var cancels []func()
	for range 20 {
		s := &seen{}
		subs = append(subs, s)
		cancels = append(cancels, v.Subscribe(func(sn Snapshot) { s.versions = append(s.versions, sn.Version) }))
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("updates not delivered within 10s")
	}
	for _, c := range cancels {
		c()
	}
	for i, s := range subs {
		if len(s.versions) == 0 {
			t.Fatalf("subscriber %d got nothing", i)
		}
		for j := 1; j < len(s.versions); j++ {
			if s.versions[j] != s.versions[j-1]+1 {
				t.Fatalf("subscriber %d got versions %v: a gap or a repeat", i, s.versions)
			}
		}
		if last := s.versions[len(s.versions)-1]; last != updates+1 {
			t.Fatalf("subscriber %d ended at v%d, want v%d", i, last, updates+1)
		}
	}
}

// A service's errors series goes once no view watches it (after the
// grace); one still watched keeps its own.
func TestErrorsSeriesGoesWithTheLastWatch(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.errRefs.SetGrace(0)
	h := newHarness(t, func(o *Options) { o.Metrics = m })
	has := func(service string) bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "switchboard_discovery_errors_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "service" && l.GetValue() == service {
						return true
					}
				}
			}
		}
		return false
	}
	kept := h.d.Watch(registry.Query{Service: "kept"})
	defer kept.Close()
	gone := h.d.Watch(registry.Query{Service: "gone"})
	h.step(t, "gone", answer{err: errors.New("connection refused")})
	<-h.sleeps
	if got := gathered(t, reg, "switchboard_discovery_errors_total", "test", "gone"); got != 1 {
		t.Fatalf("errors of gone = %v, want 1", got)
	}
	gone.Close()
	testutil.WaitFor(t, 5*time.Second, "gone's errors series to go", func() bool { return !has("gone") })
	if !has("kept") {
		t.Fatal("the errors series of a service still watched went too")
	}
}
