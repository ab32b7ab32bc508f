package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-dev/switchboard/registry"
)

// errStopped is returned by Next after Stop, Close, or the end of the
// context given to Watch.
var errStopped = errors.New("etcd: watch stopped")

func validateQuery(q registry.Query) error {
	switch {
	case q.Service == "":
		return errors.New("service: must not be empty")
	case strings.Contains(q.Service, "/"):
		return fmt.Errorf("service: %q must not contain '/'", q.Service)
	}
	return nil
}

// entry is one key as last seen: its revision, and the instance if the
// value decoded (a bad value is remembered, so that verify compares keys
// and revisions faithfully, but never listed).
type entry struct {
	modRev int64
	inst   registry.Instance
	ok     bool
}

// decode turns one key-value into an entry, logging a value it cannot use.
// The key's last two segments fill in a missing service or ID.
//
// Two value layouts are read (see the package doc): switchboard's own, the
// registry.Instance as JSON, and the one Python fleets write under
// /services/<service>/<host>:<port>, {"host": ..., "port": ...} with
// optional "weight", "tags", "meta" and "zone". A value with "host" and no
// "address" is the second; its ID is the key's last segment, host:port in
// that layout.
func (r *Registry) decode(kv *mvccpb.KeyValue) entry {
	e := entry{modRev: kv.ModRevision}
	key := string(kv.Key)
	if len(kv.Value) > maxValueBytes {
		r.log.Warn("etcd: skipping an instance value over the size limit", "key", key, "bytes", len(kv.Value), "limit", maxValueBytes)
		return e
	}
	var v wireInstance
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		r.log.Warn("etcd: skipping an instance that is not valid JSON", "key", key, "error", err)
		return e
	}
	e.inst = v.Instance
	if e.inst.Address == "" {
		e.inst.Address = v.Host
	}
	if len(v.Meta) > 0 {
		e.inst.Meta = make(map[string]string, len(v.Meta))
		for k, raw := range v.Meta {
			var str string
			if json.Unmarshal(raw, &str) != nil {
				str = string(raw) // a number, bool or object, as its JSON text
			}
			e.inst.Meta[k] = str
		}
	}
	segs := strings.Split(key, "/")
	if e.inst.ID == "" {
		e.inst.ID = segs[len(segs)-1]
	}
	if e.inst.Service == "" && len(segs) >= 2 {
		e.inst.Service = segs[len(segs)-2]
	}
	if err := e.inst.Validate(); err != nil {
		r.log.Warn("etcd: skipping an invalid instance", "key", key, "error", err)
		return e
	}
	e.ok = true
	return e
}

// wireInstance is a value of either layout: registry.Instance's fields,
// plus the Python layout's "host", and "meta" whose values may be any JSON
// (Python writes numbers and booleans as they are).
type wireInstance struct {
	registry.Instance
	Host string                     `json:"host"`
	Meta map[string]json.RawMessage `json:"meta"`
}

// selectInstances is the query's view of a service's entries, sorted by ID.
func selectInstances(entries map[string]entry, q registry.Query) []registry.Instance {
	out := make([]registry.Instance, 0, len(entries))
	for _, e := range entries {
		if !e.ok || !e.inst.HasTags(q.Tags) {
			continue
		}
		if q.PassingOnly && e.inst.Health != "" && e.inst.Health != registry.Passing {
			continue
		}
		out = append(out, e.inst)
	}
	slices.SortFunc(out, func(a, b registry.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// list reads the service's keys at the current revision.
func (r *Registry) list(ctx context.Context, service string) (map[string]entry, int64, error) {
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	resp, err := r.cli.Get(rctx, r.serviceKey(service), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	entries := make(map[string]entry, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		entries[string(kv.Key)] = r.decode(kv)
	}
	return entries, resp.Header.Revision, nil
}

// Instances lists the service's instances that carry every tag in q.Tags,
// sorted by ID. Values that are not a valid instance are skipped with a
// log line. etcd has no health checks: PassingOnly drops only instances
// whose JSON says they are not passing.
func (r *Registry) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	if err := validateQuery(q); err != nil {
		return nil, fmt.Errorf("etcd: instances: %w", err)
	}
	if r.isClosed() {
		return nil, errClosed
	}
	entries, _, err := r.list(ctx, q.Service)
	if err != nil {
		return nil, fmt.Errorf("etcd: listing %q: %w", q.Service, err)
	}
	return selectInstances(entries, q), nil
}

// Watch starts a watch of the service's instances. It does not talk to
// etcd: the first Next lists the instances and starts the etcd watch from
// that revision. The watch lasts until Stop, Close, or the end of ctx.
func (r *Registry) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	if err := validateQuery(q); err != nil {
		return nil, fmt.Errorf("etcd: watch: %w", err)
	}
	if r.isClosed() {
		return nil, errClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	q.Tags = slices.Clone(q.Tags)
	return &watcher{
		r:       r,
		q:       q,
		ctx:     wctx,
		stop:    func() { stop(); cancel() },
		reconn:  r.reconnectedCh(),
		disconn: r.disconnectedCh(),
		relist:  true,
		entries: map[string]entry{},
	}, nil
}

// watcher holds the service's keys as of revision rev and applies the etcd
// watch's events to them. All the work happens inside Next.
type watcher struct {
	r    *Registry
	q    registry.Query
	ctx  context.Context
	stop func()

	mu      sync.Mutex // one Next at a time
	entries map[string]entry
	// rev: entries hold every change to the service's keys up to and
	// including this revision.
	rev int64
	// relist: entries must be (re)read before watching.
	relist bool
	// wch is the etcd watch from rev+1, nil when none is running.
	wch         clientv3.WatchChan
	cancelWatch context.CancelFunc
	// reconn fires on the next reconnection; verify is set when one was
	// seen and the entries have not been checked against etcd since.
	reconn <-chan struct{}
	verify bool
	// disconn fires when the connection to etcd is lost.
	disconn <-chan struct{}

	last    []registry.Instance
	emitted bool
}

// Next returns the first snapshot at once (after listing), and after that
// blocks until the query's set of instances changes. It returns an error
// when the connection to etcd is lost, when etcd ends the watch (no
// leader, compaction it could not recover from, permission) or cannot be
// read; the next call resumes from the last revision seen (checking it
// against etcd first) and returns the current instances at once.
//
// Every error return, whatever its cause (including the end of ctx),
// makes the next successful Next return the current instances at once,
// changed or not, as registry.Watcher requires: the caller's view turned
// stale with the error and must learn that it is current again.
func (w *watcher) Next(ctx context.Context) (snap []registry.Instance, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		if err != nil {
			w.emitted = false
		}
	}()
	for {
		if w.ctx.Err() != nil {
			w.stopWatch()
			return nil, errStopped
		}
		if w.relist {
			entries, rev, err := w.r.list(ctx, w.q.Service)
			if err != nil {
				return nil, fmt.Errorf("etcd: watch %q: listing: %w", w.q.Service, err)
			}
			w.stopWatch()
			w.entries, w.rev, w.relist, w.verify = entries, rev, false, false
		}
		if w.wch == nil {
			wctx, cancel := context.WithCancel(w.ctx)
			// RequireLeader: a member cut off from its cluster ends the
			// watch (ErrNoLeader) instead of going silent.
			w.wch = w.r.cli.Watch(clientv3.WithRequireLeader(wctx), w.r.serviceKey(w.q.Service),
				clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
			w.cancelWatch = cancel
		}
		if w.verify {
			if err := w.verifyEntries(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if cur := selectInstances(w.entries, w.q); !w.emitted || !equalInstances(cur, w.last) {
			w.last, w.emitted = cur, true
			return slices.Clone(cur), nil
		}

		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ctx.Done():
			continue
		case <-w.reconn:
			w.reconn = w.r.reconnectedCh()
			w.verify = true
		case <-w.disconn:
			// The etcd client would resume the watch by itself when etcd
			// returns, but a caller that only blocks here cannot tell an
			// outage from a quiet service: say so (registry.Watcher's
			// contract). The next Next checks what we hold against etcd
			// and returns the current instances at once, changed or not.
			w.disconn = w.r.disconnectedCh()
			w.verify = true
			return nil, fmt.Errorf("etcd: watch %q: lost the connection to etcd; the watch resumes when it is back", w.q.Service)
		case resp, ok := <-w.wch:
			if !ok {
				// Closed without a final response: our own context
				// ended it. Start again from rev+1.
				w.stopWatch()
				continue
			}
			if resp.CompactRevision != 0 {
				// The history after rev is gone (etcd issue #8668: a
				// compacted watch cannot resume): read the current
				// state instead.
				w.r.log.Info("etcd: watch fell behind a compaction; re-listing",
					"service", w.q.Service, "revision", w.rev, "compacted", resp.CompactRevision)
				w.relist = true
				continue
			}
			if resp.Canceled {
				cerr := resp.Err()
				w.stopWatch()
				if cerr == nil {
					cerr = errors.New("canceled by etcd")
				}
				// The next Next reads (linearizably) before it calls
				// the view current again: a new watch is set up in the
				// background, so without the read that Next would
				// return before etcd had the chance to refuse it again
				// (no leader, no permission).
				w.verify = true
				return nil, fmt.Errorf("etcd: watch %q from revision %d: %w", w.q.Service, w.rev+1, cerr)
			}
			w.apply(resp.Events)
		}
	}
}

// apply applies one watch response's events (whole revisions, in order).
func (w *watcher) apply(events []*clientv3.Event) {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch ev.Type {
		case mvccpb.PUT:
			w.entries[key] = w.r.decode(ev.Kv)
		case mvccpb.DELETE:
			delete(w.entries, key)
		}
		w.rev = max(w.rev, ev.Kv.ModRevision)
	}
}

// verifyEntries runs after a reconnection. The etcd client resumes the
// watch from rev+1 by itself, which is right when etcd kept its history
// and silently wrong when it did not: an etcd whose data directory was
// wiped (or restored from an older backup) starts its revisions over, and
// a watch from our rev+1 skips everything until it catches up. So read the
// service's keys as of rev: an etcd with our history returns exactly what
// we hold; anything else (a future revision, a compacted one, other keys
// or revisions) means re-list.
func (w *watcher) verifyEntries(ctx context.Context) error {
	rctx, cancel := w.r.reqCtx(ctx)
	defer cancel()
	resp, err := w.r.cli.Get(rctx, w.r.serviceKey(w.q.Service), clientv3.WithPrefix(),
		clientv3.WithRev(w.rev), clientv3.WithKeysOnly())
	switch {
	case errors.Is(err, rpctypes.ErrFutureRev), errors.Is(err, rpctypes.ErrCompacted):
		w.r.log.Warn("etcd: history changed while disconnected; re-listing",
			"service", w.q.Service, "revision", w.rev, "reason", err)
		w.relist = true
		return nil
	case err != nil:
		return fmt.Errorf("etcd: watch %q: checking revision %d after reconnecting: %w", w.q.Service, w.rev, err)
	}
	w.verify = false
	same := len(resp.Kvs) == len(w.entries)
	for _, kv := range resp.Kvs {
		if e, ok := w.entries[string(kv.Key)]; !ok || e.modRev != kv.ModRevision {
			same = false
			break
		}
	}
	if !same {
		w.r.log.Warn("etcd: keys at our revision differ after reconnecting (etcd data replaced?); re-listing",
			"service", w.q.Service, "revision", w.rev)
		w.relist = true
	}
	return nil
}

func (w *watcher) stopWatch() {
	if w.cancelWatch != nil {
		w.cancelWatch()
	}
	w.wch, w.cancelWatch = nil, nil
}

// Stop ends the watch; a blocked Next returns an error.
func (w *watcher) Stop() {
	w.stop()
}

func equalInstances(a, b []registry.Instance) bool {
	return slices.EqualFunc(a, b, func(x, y registry.Instance) bool {
		return x.ID == y.ID && x.Service == y.Service && x.Address == y.Address &&
			x.Port == y.Port && x.Weight == y.Weight && x.Zone == y.Zone &&
			x.Health == y.Health && slices.Equal(x.Tags, y.Tags) && maps.Equal(x.Meta, y.Meta)
	})
}
