package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/registry"
)

// Snapshot is one published state of a view. It is immutable: readers must
// not modify Instances (or their Tags and Meta).
type Snapshot struct {
	Instances []registry.Instance
	// Version grows by one per published change, starting at 1.
	Version uint64
	// UpdatedAt is the last successful answer from the registry; zero when
	// the view has only been loaded from the disk cache.
	UpdatedAt time.Time
	// Stale: the last attempt failed, or the view was served from the disk
	// cache, or the empty guard is holding the previous instances.
	Stale     bool
	FromCache bool
	// LastError is the registry error that made the view stale ("" if the
	// view is not stale because of an error).
	LastError string
}

// View is a handle on the shared view of one query. It is safe for
// concurrent use.
type View struct {
	w *watch

	mu     sync.Mutex
	subs   []*subscriber
	closed bool
}

// Snapshot returns the latest snapshot; before the first one it returns
// the zero Snapshot (Version 0). It never blocks.
func (v *View) Snapshot() Snapshot {
	if s := v.w.snap.Load(); s != nil {
		return *s
	}
	return Snapshot{}
}

// Ready waits until the view has its first snapshot, from the registry or
// from the disk cache, and its subscribers have had it. It fails when ctx ends first (with the registry's last
// error in the message) or when the Discovery is closed.
func (v *View) Ready(ctx context.Context) error {
	select {
	case <-v.w.ready:
		return nil
	default:
	}
	select {
	case <-v.w.ready:
		return nil
	case <-v.w.done:
		select {
		case <-v.w.ready:
			return nil
		default:
		}
		return fmt.Errorf("discovery: %s: %w", v.w.key, ErrClosed)
	case <-ctx.Done():
		if e := v.w.lastError(); e != "" {
			return fmt.Errorf("discovery: %s: no instances yet (registry: %s): %w", v.w.key, e, ctx.Err())
		}
		return fmt.Errorf("discovery: %s: no answer from the registry yet: %w", v.w.key, ctx.Err())
	}
}

// Subscribe calls fn with the current snapshot (if there is one, before
// Subscribe returns) and then with every new one, in order. Calls for one
// view never overlap; later ones come from the view's goroutine, which waits
// for fn, so fn should be quick. fn may call the returned cancel or Close,
// but must not call Subscribe on a view of the same query. After cancel
// returns, fn is called no more (except for a call already running on
// another goroutine).
func (v *View) Subscribe(fn func(Snapshot)) (cancel func()) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return func() {}
	}
	s := &subscriber{fn: fn}
	v.subs = append(v.subs, s)
	v.mu.Unlock()
	v.w.subscribe(s)
	return func() { v.w.unsubscribe(s) }
}

// Close cancels the view's subscriptions and releases it; the watch loop
// stops when the last View of the query is closed. Close is idempotent.
func (v *View) Close() {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	v.closed = true
	subs := v.subs
	v.subs = nil
	v.mu.Unlock()
	for _, s := range subs {
		v.w.unsubscribe(s)
	}
	if v.w.d != nil {
		v.w.d.release(v.w)
	}
}

type subscriber struct {
	fn        func(Snapshot)
	cancelled atomic.Bool
}

// watch is the state and loop shared by the Views of one query.
type watch struct {
	d      *Discovery
	q      registry.Query
	key    string
	log    *slog.Logger
	errors prometheus.Counter // nil without metrics

	refs   int // guarded by d.mu
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{} // closed when the loop has returned
	ready  chan struct{} // closed with the first snapshot
	snap   atomic.Pointer[Snapshot]

	pubMu   sync.Mutex // serialises publication and delivery to subscribers
	subsMu  sync.Mutex
	subs    map[*subscriber]struct{}
	version uint64 // guarded by pubMu

	stMu sync.Mutex
	st   liveStatus

	// Loop state, owned by the loop goroutine.
	cur        []registry.Instance // what the view serves
	regLast    []registry.Instance // the registry's last answer
	fromCache  bool
	failing    bool
	grace      clock.Timer // the empty grace's; nil outside it
	published  bool
	lastErrMsg string
}

// liveStatus is what Status reports between snapshots.
type liveStatus struct {
	started     time.Time
	goodAt      time.Time // the view was last known current (when stale)
	updatedAt   time.Time
	lastErr     string
	lastErrAt   time.Time
	errors      uint64
	failing     bool
	fromCache   bool
	graceUntil  time.Time
	instances   int
	stale       bool
	version     uint64
	everCurrent bool
}

type result struct {
	insts      []registry.Instance
	err        error
	start, end time.Time
}

func newWatch(d *Discovery, q registry.Query, key string) *watch {
	w := &watch{
		d:     d,
		q:     q,
		key:   key,
		log:   d.log.With("service", q.Service, "query", key),
		done:  make(chan struct{}),
		ready: make(chan struct{}),
		subs:  map[*subscriber]struct{}{},
	}
	w.ctx, w.cancel = context.WithCancel(d.ctx)
	w.st.started = d.opts.clock.Now()
	if m := d.opts.Metrics; m != nil {
		m.errRefs.Hold([2]string{d.opts.Registry, q.Service}) // let go when run ends
		w.errors = m.errors.WithLabelValues(d.opts.Registry, q.Service)
	}
	return w
}

// closedWatch backs the Views handed out after Close: no snapshot, ever.
func closedWatch(d *Discovery, q registry.Query, key string) *watch {
	w := &watch{q: q, key: key, done: make(chan struct{}), ready: make(chan struct{}), subs: map[*subscriber]struct{}{}}
	w.cancel = func() {}
	w.st.started = d.opts.clock.Now()
	close(w.done)
	return w
}

func (w *watch) subscribe(s *subscriber) {
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	w.subsMu.Lock()
	w.subs[s] = struct{}{}
	w.subsMu.Unlock()
	if cur := w.snap.Load(); cur != nil {
		s.fn(*cur)
	}
}

func (w *watch) unsubscribe(s *subscriber) {
	s.cancelled.Store(true)
	w.subsMu.Lock()
	delete(w.subs, s)
	w.subsMu.Unlock()
}

func (w *watch) lastError() string {
	w.stMu.Lock()
	defer w.stMu.Unlock()
	return w.st.lastErr
}

// run is the watch loop: it owns the registry watcher (through pump), the
// view's state and the empty-grace timer, and delivers every snapshot.
func (w *watch) run() {
	defer w.d.loops.Done()
	defer close(w.done)
	if m := w.d.opts.Metrics; m != nil {
		defer m.errRefs.Release([2]string{w.d.opts.Registry, w.q.Service})
	}
	if w.d.cache != nil {
		if c, ok := w.d.cache.load(w.key, w.q.Service); ok {
			w.cur = c.Instances
			w.fromCache = true
			w.stMu.Lock()
			w.st.goodAt = c.SavedAt
			w.st.fromCache = true
			w.stMu.Unlock()
			w.log.Info("discovery: serving the cached view until the registry answers",
				"instances", len(c.Instances), "saved_at", c.SavedAt)
			w.publish(time.Time{})
		}
	}
	results := make(chan result)
	pumpDone := make(chan struct{})
	go func() {
		defer close(pumpDone)
		w.pump(results)
	}()
	defer func() {
		w.cancel()
		<-pumpDone
		if w.grace != nil {
			w.grace.Stop()
		}
	}()
	for {
		select {
		case <-w.ctx.Done():
			return
		case r := <-results:
			if r.err != nil {
				w.failed(r)
			} else {
				w.answered(r)
			}
		case <-w.graceC():
			w.graceOver()
		}
		if h := w.d.opts.handled; h != nil {
			h()
		}
	}
}

// pump calls the registry: Watch once, then Next for ever, backing off after
// errors. It hands every outcome to the loop.
func (w *watch) pump(out chan<- result) {
	ctx, o := w.ctx, w.d.opts
	var wt registry.Watcher
	defer func() {
		if wt != nil {
			wt.Stop()
		}
	}()
	failures := 0
	for ctx.Err() == nil {
		r := result{start: o.clock.Now()}
		if wt == nil {
			wt, r.err = w.d.reg.Watch(ctx, w.q)
			if r.err != nil && wt != nil {
				wt.Stop()
				wt = nil
			}
		}
		if r.err == nil {
			r.insts, r.err = wt.Next(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		r.end = o.clock.Now()
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
		if r.err == nil {
			failures = 0
			continue
		}
		delay := o.backoff(failures)
		failures++
		if o.sleep(ctx, delay) != nil {
			return
		}
	}
}

func (w *watch) failed(r result) {
	msg := r.err.Error()
	w.stMu.Lock()
	w.st.errors++
	w.st.lastErr = msg
	w.st.lastErrAt = r.end
	if !w.failing && !(w.fromCache && !w.st.everCurrent) {
		// The watch was live until now: the view is as old as the outage.
		w.st.goodAt = r.end
	}
	w.st.failing = true
	w.stMu.Unlock()
	if w.errors != nil {
		w.errors.Inc()
	}
	if !w.failing {
		w.log.Warn("discovery: registry error; serving the last known instances",
			"instances", len(w.cur), "error", msg)
	} else {
		w.log.Debug("discovery: registry error", "error", msg)
	}
	w.failing = true
	w.lastErrMsg = msg
	// Without a snapshot there is nothing to serve yet: Ready keeps waiting
	// rather than publishing an empty set the registry never sent.
	if w.published {
		w.publishIfChanged(w.updatedAt())
	}
}

func (w *watch) answered(r result) {
	insts := r.insts
	if insts == nil {
		insts = []registry.Instance{}
	}
	if w.failing {
		w.log.Info("discovery: registry answers again", "instances", len(insts))
	}
	w.failing = false
	w.lastErrMsg = ""
	w.regLast = insts
	w.stMu.Lock()
	w.st.failing = false
	w.st.updatedAt = r.end
	w.st.everCurrent = true
	w.stMu.Unlock()

	if len(insts) == 0 && len(w.cur) > 0 && w.d.opts.EmptyGrace > 0 {
		if w.grace == nil {
			g := w.d.opts.EmptyGrace
			w.grace = w.d.opts.clock.NewTimer(g)
			w.stMu.Lock()
			w.st.graceUntil = r.end.Add(g)
			w.stMu.Unlock()
			w.log.Warn("discovery: the registry reports no instances; keeping the previous ones for the empty grace",
				"kept", len(w.cur), "grace", g)
		}
		w.publishIfChanged(r.end)
		return
	}
	if w.grace != nil {
		w.endGrace()
		w.log.Info("discovery: instances are back within the empty grace", "instances", len(insts))
	}
	changed := !sameInstances(w.cur, insts) || !w.published
	if changed {
		w.cur = insts
	}
	w.fromCache = false
	w.publishIfChanged(r.end)
	if changed {
		w.persist(r.end)
	}
}

func (w *watch) graceOver() {
	w.log.Warn("discovery: the empty grace is over; the service has no instances",
		"dropped", len(w.cur))
	w.endGrace()
	w.cur = w.regLast
	w.fromCache = false
	w.publishIfChanged(w.updatedAt())
	w.persist(w.updatedAt())
}

func (w *watch) endGrace() {
	w.grace.Stop()
	w.grace = nil
	w.stMu.Lock()
	w.st.graceUntil = time.Time{}
	w.stMu.Unlock()
}

// graceC is the empty-grace timer's channel, or nil (never ready) outside
// the grace.
func (w *watch) graceC() <-chan time.Time {
	if w.grace == nil {
		return nil
	}
	return w.grace.C()
}

func (w *watch) stale() bool { return w.failing || w.fromCache || w.grace != nil }

func (w *watch) updatedAt() time.Time {
	w.stMu.Lock()
	defer w.stMu.Unlock()
	return w.st.updatedAt
}

// publishIfChanged publishes the loop's state unless the last snapshot
// already says the same: the same instances and the same flags. A new error
// message alone is no change (Status reports it).
func (w *watch) publishIfChanged(updatedAt time.Time) {
	if p := w.snap.Load(); p != nil && p.Stale == w.stale() && p.FromCache == w.fromCache && sameSlice(p.Instances, w.cur) {
		return
	}
	w.publish(updatedAt)
}

// publish makes the loop's state the view's next snapshot and delivers it.
func (w *watch) publish(updatedAt time.Time) {
	s := &Snapshot{
		Instances: w.cur,
		UpdatedAt: updatedAt,
		Stale:     w.stale(),
		FromCache: w.fromCache,
	}
	if w.failing {
		s.LastError = w.lastErrMsg
	}
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	w.version++
	s.Version = w.version
	w.snap.Store(s)
	w.stMu.Lock()
	w.st.instances = len(s.Instances)
	w.st.stale = s.Stale
	w.st.fromCache = s.FromCache
	w.st.version = s.Version
	w.stMu.Unlock()
	w.subsMu.Lock()
	subs := make([]*subscriber, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	w.subsMu.Unlock()
	for _, sub := range subs {
		if !sub.cancelled.Load() {
			sub.fn(*s)
		}
	}
	// Ready only once the subscribers have the first snapshot: whoever
	// waits on Ready (serve, at start) then finds their pools filled.
	if !w.published {
		w.published = true
		close(w.ready)
	}
}

func (w *watch) persist(at time.Time) {
	if w.d.cache != nil {
		w.d.cache.store(w.key, w.q, at, w.cur)
	}
}

func (w *watch) status(now time.Time) ServiceStatus {
	w.stMu.Lock()
	st := w.st
	w.stMu.Unlock()
	out := ServiceStatus{
		Registry:    w.d.opts.Registry,
		Service:     w.q.Service,
		Tags:        w.q.Tags,
		PassingOnly: w.q.PassingOnly,
		Instances:   st.instances,
		Stale:       st.stale,
		LastError:   st.lastErr,
		Errors:      st.errors,
		FromCache:   st.fromCache,
		EmptyGuard:  !st.graceUntil.IsZero(),
		Version:     st.version,
		key:         w.key,
	}
	if !st.lastErrAt.IsZero() {
		t := st.lastErrAt
		out.LastErrorAt = &t
	}
	if !st.graceUntil.IsZero() {
		t := st.graceUntil
		out.EmptyGraceUntil = &t
	}
	if !st.updatedAt.IsZero() {
		t := st.updatedAt
		out.UpdatedAt = &t
	}
	out.AgeSeconds = st.age(now).Seconds()
	return out
}

// age is 0 while the registry answers; otherwise how long the view has been
// without confirmation.
func (st liveStatus) age(now time.Time) time.Duration {
	var since time.Time
	switch {
	case st.failing || (st.fromCache && !st.everCurrent):
		since = st.goodAt
	case !st.everCurrent:
		since = st.started // waiting for the first answer
	default:
		return 0
	}
	if since.IsZero() {
		since = st.started
	}
	if d := now.Sub(since); d > 0 {
		return d
	}
	return 0
}

func sameInstances(a, b []registry.Instance) bool {
	return slices.EqualFunc(a, b, sameInstance)
}

func sameInstance(a, b registry.Instance) bool {
	return a.ID == b.ID && a.Service == b.Service && a.Address == b.Address &&
		a.Port == b.Port && a.Weight == b.Weight && a.Zone == b.Zone &&
		a.Health == b.Health && slices.Equal(a.Tags, b.Tags) && maps.Equal(a.Meta, b.Meta)
}

// sameSlice reports whether a and b are the same slice. The loop replaces
// cur only when the instances changed, so identity is equality here.
func sameSlice(a, b []registry.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}
