package health

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// hits counts the requests a backend received, by path.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) get(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[path]
}

func countingBackend(t *testing.T) (string, *hits) {
	h := &hits{n: map[string]int{}}
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.n[r.URL.Path]++
		h.mu.Unlock()
	})
	return addr, h
}

// passCounter is a Monitor's WithOnPass that counts passes.
type passCounter struct {
	mu sync.Mutex
	n  int
}

func (p *passCounter) onPass(*endpoint.Endpoint, time.Time) { p.mu.Lock(); p.n++; p.mu.Unlock() }
func (p *passCounter) get() int                             { p.mu.Lock(); defer p.mu.Unlock(); return p.n }

func startShared(t *testing.T, c ActiveConfig, clk clock.Clock, addr string) (*Monitor, *passCounter) {
	t.Helper()
	pc := &passCounter{}
	m, err := NewMonitor(c, nil, WithLogger(quiet), WithOnPass(pc.onPass), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: addr})}) // an Endpoint of its own
	m.Start(context.Background())
	return m, pc
}

// TestMonitorsShareOneProbeStreamPerAddressAndSettings runs three Monitors
// against one real HTTP backend on a fake clock: two with the same settings
// (two upstreams over one backend, or a reload's old and new upstream) and
// one with another path. The backend must see exactly one probe per
// interval on each path, both of the first two Monitors must hear every
// result, the stream must outlive the first Monitor that closes, and stop
// when the last one does.
func TestMonitorsShareOneProbeStreamPerAddressAndSettings(t *testing.T) {
	addr, backend := countingBackend(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	c := noJitter()
	c.Interval, c.Timeout, c.Adaptive, c.MaxInterval = time.Second, 500*time.Millisecond, new(false), 0
	other := c
	other.Path = "/other"

	m1, p1 := startShared(t, c, clk, addr)
	m2, p2 := startShared(t, c, clk, addr)
	m3, p3 := startShared(t, other, clk, addr)
	// Subscribing happens on the Monitors' goroutines; two streams arm
	// their first checks. A third would show up below as extra probes.
	testutil.WaitFor(t, 10*time.Second, "three Monitors subscribed", func() bool { return sharedStreams.subscribers() == 3 })
	if n := sharedStreamCount(); n != 2 {
		t.Fatalf("%d shared streams for two settings over one address, want 2", n)
	}

	// round advances the clock to the next checks once both streams have
	// armed their timers, and waits for every subscriber to hear the result.
	round := func(k int, counters ...*passCounter) {
		t.Helper()
		select {
		case <-clk.Waiting(2):
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the streams did not arm their timers; pending %v", k, clk.Pending())
		}
		clk.Advance(clk.Pending()[0])
		testutil.WaitFor(t, 10*time.Second, "every subscriber to hear the round's result", func() bool {
			for _, pc := range counters {
				if pc.get() != k {
					return false
				}
			}
			return true
		})
	}
	const rounds = 5
	for k := 1; k <= rounds; k++ {
		round(k, p1, p2, p3)
	}
	if got := backend.get("/"); got != rounds {
		t.Fatalf("backend saw %d probes on / in %d intervals from two Monitors with the same settings, want %d (one stream)", got, rounds, rounds)
	}
	if got := backend.get("/other"); got != rounds {
		t.Fatalf("backend saw %d probes on /other, want %d (its own stream)", got, rounds)
	}

	// The first Monitor leaves; the second keeps its probes.
	m1.Close()
	for k := rounds + 1; k <= rounds+3; k++ {
		round(k, p2, p3)
	}
	if got, want := backend.get("/"), rounds+3; got != want {
		t.Fatalf("after the first Monitor closed the backend saw %d probes on /, want %d", got, want)
	}
	if got := p1.get(); got != rounds {
		t.Fatalf("the closed Monitor heard %d results, want %d (none after Close)", got, rounds)
	}

	// The last subscribers leave: the streams stop and nothing is armed.
	m2.Close()
	m3.Close()
	if n := sharedStreamCount(); n != 0 {
		t.Fatalf("%d shared streams after every Monitor closed, want 0", n)
	}
	if p := clk.Pending(); len(p) != 0 {
		t.Fatalf("timers %v still armed after every Monitor closed", p)
	}
	clk.Advance(10 * time.Second)
	if got, want := backend.get("/"), rounds+3; got != want {
		t.Fatalf("probes on / went on after every Monitor closed: %d, want %d", got, want)
	}
}

// TestMonitorsWithDifferentIntervalsProbeSeparately pins the decision that
// the schedule is part of a stream's identity.
func TestMonitorsWithDifferentIntervalsProbeSeparately(t *testing.T) {
	addr, _ := countingBackend(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	c := noJitter()
	c.Interval, c.Timeout = time.Second, 500*time.Millisecond
	slow := c
	slow.Interval = 2 * time.Second
	startShared(t, c, clk, addr)
	startShared(t, c, clk, addr)
	startShared(t, slow, clk, addr)
	select {
	case <-clk.Waiting(2):
	case <-time.After(10 * time.Second):
		t.Fatalf("the streams did not arm their timers; pending %v", clk.Pending())
	}
	testutil.WaitFor(t, 10*time.Second, "three Monitors subscribed", func() bool { return sharedStreams.subscribers() == 3 })
	if n := sharedStreamCount(); n != 2 {
		t.Fatalf("%d shared streams, want 2: one per interval", n)
	}
}

// A Monitor with its own checker never shares: its checker may count or
// fake, and another Monitor's results would be none of its business.
func TestMonitorWithItsOwnCheckerDoesNotShare(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	for range 2 {
		m, err := NewMonitor(noJitter(), nil, WithChecker(TCPCheck{}), WithLogger(quiet), withClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "127.0.0.1:1"})})
		m.Start(context.Background())
	}
	select {
	case <-clk.Waiting(2):
	case <-time.After(10 * time.Second):
		t.Fatalf("two Monitors with their own checkers did not arm two timers; pending %v", clk.Pending())
	}
	if n := sharedStreamCount(); n != 0 {
		t.Fatalf("%d shared streams, want 0", n)
	}
}

// TestMonitorJoiningAStreamTakesOverItsVerdict: a Monitor that subscribes
// to a stream which has already found its endpoint down (a reload's new
// upstream) reports it down at once, without waiting out the stream's
// backoff for a check of its own.
func TestMonitorJoiningAStreamTakesOverItsVerdict(t *testing.T) {
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	clk := clock.NewFake(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC))
	c := noJitter()
	c.Interval, c.Timeout, c.Fall = time.Second, 500*time.Millisecond, 2

	first := make(chan activeVerdict, 4)
	m1, err := NewMonitor(c, collect(first), WithLogger(quiet), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	m1.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: addr})})
	m1.Start(context.Background())
	for range 2 {
		select {
		case <-clk.Waiting(1):
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not arm its timer")
		}
		clk.Advance(clk.Pending()[0])
	}
	v1 := within(t, first, 10*time.Second, "the first Monitor's verdict")
	if v1.healthy || !strings.HasPrefix(v1.reason, "2 consecutive HTTP check failures: ") {
		t.Fatalf("first verdict %+v, want unhealthy after 2 failures", v1)
	}

	second := make(chan activeVerdict, 4)
	m2, err := NewMonitor(c, collect(second), WithLogger(quiet), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	m2.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: addr})})
	m2.Start(context.Background())
	v := within(t, second, 10*time.Second, "the joining Monitor's verdict, with the clock standing still")
	if v.healthy || v.reason != v1.reason || !v.at.Equal(v1.at) {
		t.Fatalf("joining Monitor's verdict %+v, want unhealthy for the stream's reason at its last check: %+v", v, v1)
	}
	if n := sharedStreamCount(); n != 1 {
		t.Fatalf("%d shared streams, want 1", n)
	}
}
