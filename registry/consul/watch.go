package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/consul/api"
	"github.com/switchboard-dev/switchboard/registry"
	"golang.org/x/time/rate"
)

// errStopped is what Next returns after Stop.
var errStopped = errors.New("consul: watch stopped")

// Instances lists q's instances with one plain (non-blocking) query of
// /v1/health/service; PassingOnly asks Consul for passing instances only.
func (r *Registry) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	if err := checkQuery(q); err != nil {
		return nil, fmt.Errorf("consul: list %q: %w", q.Key(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	opts := (&api.QueryOptions{Datacenter: r.cfg.Datacenter}).WithContext(ctx)
	entries, _, err := r.client.Health().ServiceMultipleTags(q.Service, q.Tags, q.PassingOnly, opts)
	if err != nil {
		return nil, fmt.Errorf("consul: list %q: %w", q.Key(), err)
	}
	insts, _ := convert(entries)
	return insts, nil
}

// Watch starts a watch of q. It sends nothing until the first Next.
func (r *Registry) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	if err := checkQuery(q); err != nil {
		return nil, fmt.Errorf("consul: watch %q: %w", q.Key(), err)
	}
	q.Tags = slices.Clone(q.Tags)
	stop, cancel := context.WithCancel(context.Background())
	return &watcher{
		r:      r,
		q:      q,
		churn:  rate.NewLimiter(rate.Every(r.cfg.ChurnInterval), 2),
		stop:   stop,
		cancel: cancel,
	}, nil
}

func checkQuery(q registry.Query) error {
	if err := checkPathSegment("service", q.Service); err != nil {
		return err
	}
	for i, t := range q.Tags {
		if t == "" {
			return fmt.Errorf("tags[%d]: must not be empty", i)
		}
	}
	return nil
}

// watcher runs the blocking-query loop of one query. Next must not be
// called concurrently.
type watcher struct {
	r     *Registry
	q     registry.Query
	churn *rate.Limiter

	stop   context.Context // ends with Stop
	cancel context.CancelFunc

	mu    sync.Mutex // Next is not concurrent, but keep the state honest
	index uint64     // the X-Consul-Index to wait on; 0 only before the first answer
	last  []registry.Instance
	sent  bool
	// failed: the last Next returned an error (a failed query, or ctx
	// ended while it waited for a churn token). The next query does not
	// block and its answer is returned even when nothing changed, so the
	// caller learns at once that the registry answers again
	// (registry.Watcher's contract).
	failed bool
}

// Next returns the first snapshot at once, then blocks until the instances
// change. An error leaves the index as it was, so the next call resumes
// where the watch was; that call asks without blocking and returns the
// current instances even if they did not change.
func (w *watcher) Next(ctx context.Context) ([]registry.Instance, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.stop, cancel)()
	for {
		if w.stop.Err() != nil {
			return nil, errStopped
		}
		insts, changed, err := w.poll(ctx)
		if w.stop.Err() != nil {
			return nil, errStopped
		}
		if err != nil {
			return nil, err
		}
		if changed {
			return insts, nil
		}
		// Consul's docs: rate limit the loop so that results that churn
		// without a change degrade into polling at a reasonable rate,
		// with a token bucket of burst 2 rather than a sleep every time.
		if err := w.churn.Wait(ctx); err != nil {
			if w.stop.Err() != nil {
				return nil, errStopped
			}
			// Like a failed query: the next Next asks without
			// blocking and returns what it gets.
			w.failed = true
			return nil, fmt.Errorf("consul: watch %q: %w", w.q.Key(), err)
		}
	}
}

// poll sends one query (blocking when there is an index) and reports
// whether it brought a change worth a snapshot.
func (w *watcher) poll(ctx context.Context) ([]registry.Instance, bool, error) {
	cfg := w.r.cfg
	idx := w.index
	opts := &api.QueryOptions{Datacenter: cfg.Datacenter}
	timeout := cfg.RequestTimeout
	if idx > 0 && !w.failed {
		opts.WaitIndex, opts.WaitTime = idx, cfg.WaitTime
		// Consul may hold the query for wait plus up to wait/16 of jitter.
		timeout += cfg.WaitTime + cfg.WaitTime/16
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	entries, meta, err := w.r.client.Health().ServiceMultipleTags(w.q.Service, w.q.Tags, w.q.PassingOnly, opts.WithContext(ctx))
	if err != nil {
		w.failed = true
		return nil, false, fmt.Errorf("consul: watch %q: %w", w.q.Key(), err)
	}
	recovered := w.failed
	w.failed = false
	got := meta.LastIndex
	next := got
	if got < idx {
		// The index went backwards (a snapshot restore, a server
		// upgrade): reset it, or updates could be missed for an unbounded
		// time.
		w.r.log.Info("consul: the index went backwards; restarting the watch", "query", w.q.Key(), "index", idx, "returned", got)
		next = 0
	}
	// Never block on an index below 1 (a query with index 0 does not block;
	// 1 is always safe): this also turns the reset above into a query that
	// returns the current state at once.
	w.index = max(next, 1)
	if w.sent && got == idx && !recovered {
		return nil, false, nil // the wait ran out: no change
	}
	insts, dropped := convert(entries)
	if w.sent && !recovered && slices.EqualFunc(insts, w.last, sameInstance) {
		return nil, false, nil // a new index, the same instances
	}
	if len(dropped) > 0 {
		w.r.log.Warn("consul: dropping unusable instances", "query", w.q.Key(), "count", len(dropped), "first", dropped[0])
	}
	w.last, w.sent = insts, true
	return insts, true, nil
}

// Stop ends the watch; a Next in progress returns.
func (w *watcher) Stop() { w.cancel() }

// convert turns /v1/health/service entries into instances, sorted by ID,
// address and port. The address is the service's, or the node's when the
// service has none (Consul's rule). Weight is Weights.Passing, or
// Weights.Warning for an instance whose checks warn. Instances that cannot
// be dialled (no port, no address) are dropped and described in dropped.
func convert(entries []*api.ServiceEntry) (insts []registry.Instance, dropped []string) {
	insts = make([]registry.Instance, 0, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		s := e.Service
		in := registry.Instance{
			ID:      s.ID,
			Service: s.Service,
			Address: s.Address,
			Port:    s.Port,
			Tags:    s.Tags,
			Meta:    s.Meta,
			Zone:    s.Meta["zone"],
			Weight:  s.Weights.Passing,
			Health:  health(e.Checks),
		}
		if in.Address == "" && e.Node != nil {
			in.Address = e.Node.Address
		}
		if in.Health == registry.Warning && s.Weights.Warning > 0 {
			in.Weight = s.Weights.Warning
		}
		if in.Weight < 0 {
			in.Weight = 0
		}
		if err := in.Validate(); err != nil {
			dropped = append(dropped, fmt.Sprintf("%q: %v", in.ID, err))
			continue
		}
		insts = append(insts, in)
	}
	slices.SortFunc(insts, func(a, b registry.Instance) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	return insts, dropped
}

// health is the aggregate of an instance's checks: maintenance, and a
// status Consul's client does not know, count as critical.
func health(checks api.HealthChecks) registry.Health {
	switch checks.AggregatedStatus() {
	case api.HealthPassing:
		return registry.Passing
	case api.HealthWarning:
		return registry.Warning
	default:
		return registry.Critical
	}
}

func sameInstance(a, b registry.Instance) bool {
	return a.ID == b.ID && a.Service == b.Service && a.Address == b.Address &&
		a.Port == b.Port && a.Weight == b.Weight && a.Zone == b.Zone &&
		a.Health == b.Health && slices.Equal(a.Tags, b.Tags) && maps.Equal(a.Meta, b.Meta)
}
