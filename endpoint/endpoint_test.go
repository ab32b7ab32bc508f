package endpoint_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

func TestPoolUpdateKeepsUnchangedEndpoints(t *testing.T) {
	p := endpoint.NewPool("orders")
	p.Update([]endpoint.Spec{{Address: "a:1"}, {Address: "b:1", Weight: 2}})
	s1 := p.Snapshot()
	a, b := s1.All[0], s1.All[1]
	a.Acquire()
	removed := p.Update([]endpoint.Spec{{Address: "a:1"}, {Address: "b:1", Weight: 3}, {Address: "c:1"}})
	s2 := p.Snapshot()
	if s2.Version != s1.Version+1 {
		t.Fatalf("version %d after %d", s2.Version, s1.Version)
	}
	if s2.All[0] != a || a.InFlight() != 1 {
		t.Fatal("an unchanged target lost its endpoint and live state")
	}
	if s2.All[1] == b || s2.All[1].Weight() != 3 {
		t.Fatal("a target whose weight changed kept its old endpoint")
	}
	if len(removed) != 1 || removed[0] != b {
		t.Fatalf("removed %v, want the old b", removed)
	}
	if len(s2.All) != 3 || s2.All[2].Address() != "c:1" || s2.All[2].Weight() != 1 {
		t.Fatalf("snapshot %v", s2.All)
	}
}

func TestSnapshotReadyFollowsState(t *testing.T) {
	p := endpoint.NewPool("u")
	var got []*endpoint.Set
	cancel := p.Subscribe(func(s *endpoint.Set) { got = append(got, s) })
	p.Update([]endpoint.Spec{{Address: "a:1"}, {Address: "b:1"}})
	b := p.Snapshot().All[1]
	if !b.SetStatus(endpoint.Ejected, "5 consecutive failures", time.Unix(100, 0)) {
		t.Fatal("SetStatus to a new state reported no change")
	}
	p.Refresh()
	if s := p.Snapshot(); len(s.Ready) != 1 || s.Ready[0].Address() != "a:1" || len(s.All) != 2 {
		t.Fatalf("ready %v of %v, want only a", s.Ready, s.All)
	}
	cancel()
	p.Refresh()
	if len(got) != 3 { // the current set at Subscribe, the update, the refresh
		t.Fatalf("subscriber got %d sets, want 3 (none after cancel)", len(got))
	}
}

func TestSetStatusKeepsSinceWhenStateIsUnchanged(t *testing.T) {
	e := endpoint.New(endpoint.Spec{Address: "a:1"})
	t1, t2 := time.Unix(100, 0), time.Unix(200, 0)
	e.SetStatus(endpoint.Unhealthy, "check failed", t1)
	if e.SetStatus(endpoint.Unhealthy, "check failed again", t2) {
		t.Fatal("same state reported as a change")
	}
	if st := e.Status(); !st.Since.Equal(t1) || st.Reason != "check failed again" {
		t.Fatalf("status %+v: want since %v and the new reason", st, t1)
	}
	if e.State().Serving() || !endpoint.Probation.Serving() {
		t.Fatal("Serving is wrong")
	}
}

type recorder struct{ got []endpoint.Outcome }

func (r *recorder) Observe(_ *endpoint.Endpoint, o endpoint.Outcome) { r.got = append(r.got, o) }

func TestReleaseCountsAndObserves(t *testing.T) {
	e := endpoint.New(endpoint.Spec{Address: "a:1"})
	r := &recorder{}
	e.SetObserver(r)
	done := e.DoneFunc()
	e.Acquire()
	e.Acquire()
	done(endpoint.Outcome{Status: 200})
	done(endpoint.Outcome{Err: errors.New("reset"), Canceled: true})
	if e.InFlight() != 0 || e.Requests() != 2 || e.Failures() != 0 || len(r.got) != 2 {
		t.Fatalf("in-flight %d, requests %d, failures %d, observed %d: a canceled outcome is no failure",
			e.InFlight(), e.Requests(), e.Failures(), len(r.got))
	}
	e.Acquire()
	done(endpoint.Outcome{Err: errors.New("connect refused")})
	if e.Failures() != 1 {
		t.Fatalf("failures %d, want 1", e.Failures())
	}
}

func TestAcquireReleaseAllocateNothing(t *testing.T) {
	e := endpoint.New(endpoint.Spec{Address: "a:1"})
	done := e.DoneFunc()
	if n := testing.AllocsPerRun(1000, func() { e.Acquire(); done(endpoint.Outcome{Status: 200}) }); n != 0 {
		t.Fatalf("%v allocations per Acquire+Done", n)
	}
}

func Example() {
	p := endpoint.NewPool("orders")
	p.Update([]endpoint.Spec{{Address: "10.0.0.1:8080", Weight: 3}, {Address: "10.0.0.2:8080"}})
	ep := p.Snapshot().All[1]
	ep.SetStatus(endpoint.Ejected, "5 consecutive connect failures", time.Date(2026, 1, 1, 3, 0, 12, 0, time.UTC))
	p.Refresh()
	for _, e := range p.Snapshot().All {
		st := e.Status()
		fmt.Printf("%s weight=%d %s", e.Address(), e.Weight(), st.State)
		if st.State != endpoint.Healthy {
			fmt.Printf(": %s at %s", st.Reason, st.Since.Format(time.TimeOnly))
		}
		fmt.Println()
	}
	fmt.Println("ready:", len(p.Snapshot().Ready))
	// Output:
	// 10.0.0.1:8080 weight=3 healthy
	// 10.0.0.2:8080 weight=1 ejected: 5 consecutive connect failures at 03:00:12
	// ready: 1
}

func TestObserversFanOut(t *testing.T) {
	e := endpoint.New(endpoint.Spec{Address: "a:1"})
	a, b := &recorder{}, &recorder{}
	e.SetObserver(endpoint.Observers{a, b})
	e.Acquire()
	e.Release(endpoint.Outcome{Status: 503})
	if len(a.got) != 1 || len(b.got) != 1 || b.got[0].Status != 503 {
		t.Fatalf("a %v, b %v", a.got, b.got)
	}
}

// Nanotime readings and time.Now readings share one scale: NanotimeOf and
// TimeOf convert between them without loss (on the monotonic clock), and a
// Nanotime reading falls between the time.Now readings around it. No
// reading is 0, which means unset.
func TestNanotimeMatchesTimeNow(t *testing.T) {
	before := time.Now()
	n := endpoint.Nanotime()
	after := time.Now()
	if n == 0 {
		t.Fatal("Nanotime returned 0, the unset value")
	}
	if lo, hi := endpoint.NanotimeOf(before), endpoint.NanotimeOf(after); n < lo || n > hi {
		t.Fatalf("Nanotime %d is outside [%d, %d], the time.Now readings around it", n, lo, hi)
	}
	past := before.Add(-time.Hour)
	if back := endpoint.TimeOf(endpoint.NanotimeOf(past)); back.Sub(past) != 0 || !back.Equal(past) {
		t.Fatalf("TimeOf(NanotimeOf(t)) is %v away from t", back.Sub(past))
	}
}

// Outcome.Time is TimeOf(At) when At is set, without reading the clock,
// and time.Now when it is not.
func TestOutcomeTimeIsAtOrNow(t *testing.T) {
	at := time.Now().Add(-time.Minute)
	o := endpoint.Outcome{At: endpoint.NanotimeOf(at)}
	if got := o.Time(); got.Sub(at) != 0 {
		t.Fatalf("with At set a minute ago, Time() is %v away from it", got.Sub(at))
	}
	before := time.Now()
	got := (&endpoint.Outcome{}).Time()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Fatalf("without At, Time() = %v is not between the time.Now readings around the call (%v, %v)", got, before, after)
	}
}
