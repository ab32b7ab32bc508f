package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// A stream is one address's probes on one schedule: the loop that waits,
// checks, and hands every result to its subscribers (the probes of one or
// more Monitors). A Monitor with its own checker has a stream per
// endpoint; the others share theirs through sharedStreams.
type stream struct {
	cfg     ActiveConfig
	checker Checker
	clock   clock.Clock
	addr    string
	key     streamKey // zero for a private stream
	shared  bool

	nudge  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	subs     []subscription
	t        tracker   // what the stream has seen; steers its schedule
	observed bool      // t has seen a result
	lastErr  error     // the last result
	lastAt   time.Time // when it ended
	refs     int       // guarded by sharedStreams.mu for shared streams
}

type subscription struct {
	m *Monitor
	p *probe
}

// streamKey identifies a shared stream: the address, the clock (tests run
// Monitors on fake clocks), and the whole config with defaults filled in,
// its pointers folded into values so that equal settings compare equal.
type streamKey struct {
	addr     string
	clock    clock.Clock
	cfg      ActiveConfig // Jitter and Adaptive nil
	jitter   float64
	adaptive bool
}

// sharedStreams is the process's shared probe streams. Its lock also
// guards their refs, so that a stream found in the map is never one whose
// last subscriber is leaving.
var sharedStreams = streamTable{m: map[streamKey]*stream{}}

type streamTable struct {
	mu sync.Mutex
	m  map[streamKey]*stream
}

// subscribers is how many probes are subscribed to shared streams, for
// tests.
func (t *streamTable) subscribers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.m {
		n += s.refs
	}
	return n
}

func keyOf(cfg ActiveConfig, addr string, c clock.Clock) streamKey {
	k := streamKey{addr: addr, clock: c, jitter: cfg.jitter(), adaptive: cfg.Adaptive == nil || *cfg.Adaptive}
	cfg.Jitter, cfg.Adaptive = nil, nil
	k.cfg = cfg
	return k
}

// subscribe adds p to its stream, starting the stream if it is new; a new
// stream's first schedule takes healthy as its verdict. A probe that joins
// a running shared stream takes over what the stream has seen: its
// consecutive passes and failures and its verdict, reported at once if it
// differs from healthy. A reload's new upstream thus knows at once that an
// endpoint is down, instead of waiting out the stream's backoff to learn it
// again.
func (m *Monitor) subscribe(p *probe, healthy bool) *stream {
	if !m.shared {
		s := newStream(m, p.ep.Address())
		s.refs = 1
		p.mu.Lock()
		p.stream = s
		s.add(m, p)
		p.mu.Unlock()
		s.start(healthy)
		return s
	}
	key := keyOf(m.cfg, p.ep.Address(), m.clock)
	sharedStreams.mu.Lock()
	s := sharedStreams.m[key]
	fresh := s == nil
	if fresh {
		s = newStream(m, p.ep.Address())
		s.key, s.shared = key, true
		sharedStreams.m[key] = s
	}
	s.refs++
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stream = s
	s.mu.Lock()
	var changed bool
	var reason string
	if s.observed {
		// The stream's tracker has the same rise and fall (the config is
		// part of the key); only the kind in reasons is the Monitor's.
		p.t.passes, p.t.fails = s.t.passes, s.t.fails
		if s.t.healthy != p.t.healthy {
			p.t.healthy, changed = s.t.healthy, true
			if s.t.healthy {
				reason = fmt.Sprintf("%d consecutive %s check passes", s.t.passes, m.kind)
			} else {
				reason = fmt.Sprintf("%d consecutive %s check failures: %v", s.t.fails, m.kind, s.lastErr)
			}
		}
	}
	s.subs = append(s.subs, subscription{m, p})
	now := s.lastAt
	s.mu.Unlock()
	if fresh {
		s.start(healthy)
	}
	sharedStreams.mu.Unlock()
	if changed {
		m.report(p, reason, now)
	}
	return s
}

func newStream(m *Monitor, addr string) *stream {
	return &stream{cfg: m.cfg, checker: m.checker, clock: m.clock, addr: addr, nudge: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *stream) add(m *Monitor, p *probe) {
	s.mu.Lock()
	s.subs = append(s.subs, subscription{m, p})
	s.mu.Unlock()
}

func (s *stream) start(healthy bool) {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx, healthy)
}

// unsubscribe removes p: after it returns p hears of no more results. The
// last subscriber to leave stops the stream and waits for its loop to end.
func (s *stream) unsubscribe(p *probe) {
	p.mu.Lock() // waits out a delivery in progress
	p.off, p.stream = true, nil
	p.mu.Unlock()

	s.mu.Lock()
	s.subs = slices.DeleteFunc(s.subs, func(x subscription) bool { return x.p == p })
	s.mu.Unlock()

	last := false
	if s.shared {
		sharedStreams.mu.Lock()
		s.refs--
		if last = s.refs == 0; last {
			delete(sharedStreams.m, s.key)
		}
		sharedStreams.mu.Unlock()
	} else {
		last = true
	}
	if last {
		s.cancel()
		<-s.done
	}
}

// run is the probe loop: wait, check, deliver, on the schedule of s.cfg. Its
// own tracker, which starts at healthy, steers the schedule (backoff while
// unhealthy) and is what a joining subscriber takes over; each subscriber
// keeps its own verdict from then on.
func (s *stream) run(ctx context.Context, healthy bool) {
	defer close(s.done)
	cfg := s.cfg
	s.mu.Lock()
	s.t = tracker{rise: cfg.Rise, fall: cfg.Fall, healthy: healthy}
	s.mu.Unlock()
	t := &s.t // written under mu, read here without it: this goroutine is the only writer
	sch := newSchedule(cfg, nil)
	wait := sch.first()
	due := s.clock.Now().Add(wait)
	timer := s.clock.NewTimer(wait)
	defer timer.Stop()
	var subs []subscription
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.nudge:
			sch.nudge()
			// Only a healthy endpoint's wait is brought forward: an
			// unhealthy one keeps its backoff, which protects the host.
			if now := s.clock.Now(); t.healthy && due.Sub(now) > cfg.Interval {
				wait = sch.jitter(cfg.Interval)
				due = now.Add(wait)
				timer.Stop()
				timer.Reset(wait)
			}
		case <-timer.C():
			cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			began := s.clock.Now()
			err := s.checker.Check(cctx, s.addr)
			cancel()
			if ctx.Err() != nil {
				return // stopped mid-check: the result says nothing
			}
			if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("timeout after %v: %w", cfg.Timeout, err)
			}
			now := s.clock.Now()
			took := now.Sub(began)
			s.mu.Lock()
			t.observe(err)
			s.observed, s.lastErr, s.lastAt = true, err, now
			subs = append(subs[:0], s.subs...)
			s.mu.Unlock()
			for _, sub := range subs {
				sub.m.deliver(sub.p, err, now, took)
			}
			clear(subs)
			wait = sch.next(err == nil, t.healthy)
			due = now.Add(wait)
			timer.Reset(wait)
		}
	}
}

// sharedStreamCount is how many shared streams run, for tests.
func sharedStreamCount() int {
	sharedStreams.mu.Lock()
	defer sharedStreams.mu.Unlock()
	return len(sharedStreams.m)
}
