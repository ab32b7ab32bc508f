package upstream_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// view is an in-memory upstream.View (a fake for these unit tests; the
// proxy's tests run real registries).
type view struct {
	mu     sync.Mutex
	last   discovery.Snapshot
	subs   map[int]func(discovery.Snapshot)
	next   int
	closed int
}

func newView() *view { return &view{subs: map[int]func(discovery.Snapshot){}} }

func (v *view) Snapshot() discovery.Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

func (v *view) Subscribe(fn func(discovery.Snapshot)) func() {
	v.mu.Lock()
	id := v.next
	v.next++
	v.subs[id] = fn
	last := v.last
	v.mu.Unlock()
	if last.Version > 0 {
		fn(last)
	}
	return func() {
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
	}
}

func (v *view) Close() {
	v.mu.Lock()
	v.closed++
	v.mu.Unlock()
}

func (v *view) publish(in ...registry.Instance) {
	v.mu.Lock()
	v.last = discovery.Snapshot{Instances: in, Version: v.last.Version + 1}
	subs := make([]func(discovery.Snapshot), 0, len(v.subs))
	for _, fn := range v.subs {
		subs = append(subs, fn)
	}
	s := v.last
	v.mu.Unlock()
	for _, fn := range subs {
		fn(s)
	}
}

func targets(addrs ...string) []endpoint.Spec {
	var out []endpoint.Spec
	for _, a := range addrs {
		out = append(out, endpoint.Spec{Address: a})
	}
	return out
}

// fail reports n failed picks of the endpoint at addr.
func fail(t *testing.T, u *upstream.Upstream, addr string, n int) {
	t.Helper()
	for i := 0; i < n; {
		p, err := u.Pick(&balance.Info{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint.Address() != addr {
			p.Done(endpoint.Outcome{Status: 200})
			continue
		}
		p.Done(endpoint.Outcome{Err: errors.New("reset")})
		i++
	}
}

func TestPrepareKeepsEndpointsAndTheirStateAcrossAReload(t *testing.T) {
	passive := &health.PassiveConfig{ConsecutiveFailures: 2}
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1"), Health: upstream.Health{Passive: passive}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	fail(t, u, "b:1", 2)
	b := u.Pool().Snapshot().All[1]
	if b.State() != endpoint.Ejected {
		t.Fatalf("b is %s after 2 failures, want ejected", b.State())
	}
	// A new balancing policy and a third target; the health settings stay.
	c, err := u.Prepare(upstream.Config{Balance: balance.Config{Policy: balance.LeastConnName}, Targets: targets("a:1", "b:1", "c:1"),
		Health: upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if u.Policy() != balance.RoundRobinName || len(u.Pool().Snapshot().All) != 2 {
		t.Fatalf("Prepare changed the running upstream: policy %s, %d endpoints", u.Policy(), len(u.Pool().Snapshot().All))
	}
	c.Commit()
	all := u.Pool().Snapshot().All
	if u.Policy() != balance.LeastConnName || len(all) != 3 {
		t.Fatalf("after Commit: policy %s, %d endpoints; want least_conn and 3", u.Policy(), len(all))
	}
	if all[1] != b || b.State() != endpoint.Ejected {
		t.Fatalf("b lost its live state across the reload: same endpoint %v, state %s", all[1] == b, all[1].State())
	}
}

func TestDiscardClosesOnlyAViewTheUpstreamDoesNotFollow(t *testing.T) {
	v1 := newView()
	v1.publish(registry.Instance{ID: "a", Address: "10.0.0.1", Port: 80})
	u, err := upstream.New("app", upstream.Config{View: v1})
	if err != nil {
		t.Fatal(err)
	}
	same, err := u.Prepare(upstream.Config{View: v1})
	if err != nil {
		t.Fatal(err)
	}
	same.Discard()
	v2 := newView()
	other, err := u.Prepare(upstream.Config{View: v2})
	if err != nil {
		t.Fatal(err)
	}
	other.Discard()
	if v1.closed != 0 || v2.closed != 1 {
		t.Fatalf("closed: the followed view %d times, the dropped one %d; want 0 and 1", v1.closed, v2.closed)
	}
	u.Close()
	if v1.closed != 1 {
		t.Fatalf("Close closed the followed view %d times, want 1", v1.closed)
	}
}

func TestRegistryCriticalKeepsTheEndpointVisibleButOut(t *testing.T) {
	v := newView()
	u, err := upstream.New("app", upstream.Config{View: v})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	v.publish(registry.Instance{ID: "a", Address: "10.0.0.1", Port: 80}, registry.Instance{ID: "b", Address: "10.0.0.2", Port: 80, Health: registry.Critical})
	s := u.Pool().Snapshot()
	if len(s.All) != 2 || len(s.Ready) != 1 {
		t.Fatalf("%d endpoints, %d ready; want 2 and 1", len(s.All), len(s.Ready))
	}
	if st := s.All[1].Status(); st.State != endpoint.Unhealthy || st.Reason != "registry: critical" {
		t.Fatalf("the critical instance is %s (%q), want unhealthy (registry: critical)", st.State, st.Reason)
	}
}

// With RequirePassing (passing_only), a warning instance is out as well,
// visible with the registry's verdict; without it, it takes traffic.
func TestRegistryWarningIsOutOnlyWhenPassingIsRequired(t *testing.T) {
	for _, require := range []bool{true, false} {
		v := newView()
		u, err := upstream.New("app", upstream.Config{View: v, RequirePassing: require})
		if err != nil {
			t.Fatal(err)
		}
		v.publish(registry.Instance{ID: "a", Address: "10.0.0.1", Port: 80}, registry.Instance{ID: "b", Address: "10.0.0.2", Port: 80, Health: registry.Warning})
		s := u.Pool().Snapshot()
		st := s.All[1].Status()
		if require && (len(s.Ready) != 1 || st.State != endpoint.Unhealthy || st.Reason != "registry: warning") {
			t.Errorf("passing required: %d ready, the warning instance %s (%q); want 1, unhealthy (registry: warning)", len(s.Ready), st.State, st.Reason)
		}
		if !require && (len(s.Ready) != 2 || st.State != endpoint.Healthy) {
			t.Errorf("passing not required: %d ready, the warning instance %s (%q); want 2, healthy", len(s.Ready), st.State, st.Reason)
		}
		u.Close()
	}
}

func TestCloseGivesEndpointsBackTheirHealthyState(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1"),
		Health: upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	fail(t, u, "a:1", 1)
	u.Close()
	if st := u.Pool().Snapshot().All[0].Status(); st.State != endpoint.Healthy || st.Reason != "upstream removed" {
		t.Fatalf("after Close a is %s (%q), want healthy: nothing judges it any more", st.State, st.Reason)
	}
}

func TestUntriedCountsEveryEndpointInPanicMode(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1"),
		Health: upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 1, MaxEjectedPercent: 100}, PanicThreshold: 0.9}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	fail(t, u, "a:1", 1)
	a := u.Pool().Snapshot().All[0]
	if len(u.Pool().Snapshot().Ready) != 1 {
		t.Fatalf("want a ejected and b ready")
	}
	// In panic (1 of 2 ready < 0.9) the balancer picks from both, so a
	// retry after b can still go to a.
	b := u.Pool().Snapshot().All[1]
	if !u.Untried([]*endpoint.Endpoint{b}) {
		t.Fatal("in panic mode the ejected a is still an endpoint to try")
	}
	if u.Untried([]*endpoint.Endpoint{a, b}) {
		t.Fatal("with both tried nothing is left")
	}
}

func TestTheLoadHeaderIsCanonical(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1"),
		Balance: balance.Config{Policy: balance.DynamicWeightName, DynamicWeight: balance.DynamicWeightConfig{Header: "x-backend-load"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if h := u.LoadHeader(); h != "X-Backend-Load" {
		t.Fatalf("LoadHeader() = %q, want the canonical X-Backend-Load (response headers are looked up by it)", h)
	}
}

func TestCommitOfAStaleChangePanics(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	first, err := u.Prepare(upstream.Config{Targets: targets("a:1", "b:1")})
	if err != nil {
		t.Fatal(err)
	}
	stale, err := u.Prepare(upstream.Config{Targets: targets("c:1")})
	if err != nil {
		t.Fatal(err)
	}
	first.Commit()
	defer func() {
		if recover() == nil {
			t.Fatal("Commit of a Change prepared before another was committed did not panic")
		}
		if n := len(u.Pool().Snapshot().All); n != 2 {
			t.Fatalf("the stale Change changed the pool to %d endpoints", n)
		}
	}()
	stale.Commit()
}

// TestAPassingActiveCheckEndsAnEjectionItNeverSawFail: an endpoint ejected
// by passive health during an outage shorter than fall checks (its checks
// never failed, so its verdict never changed) goes on probation at its
// next passing check, not after the whole ejection time; docs/health.md
// promises its return is seen within a few checks.
func TestAPassingActiveCheckEndsAnEjectionItNeverSawFail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	active := &health.ActiveConfig{Type: "tcp", Interval: 50 * time.Millisecond, AllowFast: true, Timeout: 40 * time.Millisecond}
	u, err := upstream.New("app", upstream.Config{Targets: targets(ln.Addr().String(), "b:1"),
		Health: upstream.Health{Active: active, Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjection: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	fail(t, u, ln.Addr().String(), 1)
	ep := u.Pool().Snapshot().All[0]
	if ep.State() != endpoint.Ejected {
		t.Fatalf("after a failure the endpoint is %s, want ejected", ep.State())
	}
	testutil.WaitFor(t, 5*time.Second, "a passing check to end the ejection", func() bool { return ep.State() == endpoint.Probation })
}

// An endpoint's breaker judges each outcome at the outcome's time: At when
// the caller (or the policy) read the clock already, so the breaker that
// opens says it opened then, not at a reading of its own.
func TestTheEndpointBreakerTakesTheOutcomesTime(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1"), Breaker: &breaker.Config{ConsecutiveFailures: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	at := time.Now().Add(-time.Second) // distinct from any reading the breaker could take
	for range 2 {
		p, err := u.Pick(&balance.Info{})
		if err != nil {
			t.Fatal(err)
		}
		p.Done(endpoint.Outcome{Err: errors.New("reset"), At: endpoint.NanotimeOf(at)})
	}
	st := u.Pool().Snapshot().All[0].Status()
	if st.State != endpoint.BreakerOpen {
		t.Fatalf("a:1 is %s after 2 failures with consecutive_failures 2, want breaker_open", st.State)
	}
	if d := st.Since.Sub(at); d != 0 {
		t.Fatalf("the breaker opened %v after the failures' At; want at At exactly", d)
	}
}
