// Package static is a registry.Discoverer over a fixed list of instances:
// given in code or configuration (New, Replace), or read from a YAML or
// JSON file that is watched for changes (NewFile).
//
// A file edit takes effect about 100ms after the last write to it,
// including an editor's or a deployment tool's atomic replace (write a
// temporary file, rename it over the old one) and Kubernetes ConfigMap
// updates (a symlink swap in the directory). An edit that does not parse or
// validate changes nothing: every watcher's Next returns one error naming
// the file, line and field, and the previous instances keep being served.
// The next good version ends the error: each watcher's Next returns its
// instances then, even if they are the same as before the bad edit.
package static

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/switchboard-dev/switchboard/registry"
)

const (
	// settle is how long a file must be quiet after a change before it
	// is read: editors write in several steps.
	settle = 100 * time.Millisecond
	// maxFileBytes caps the services file.
	maxFileBytes = 16 << 20
)

// Registry serves a list of instances. Its methods are safe for concurrent
// use.
type Registry struct {
	mu        sync.Mutex
	instances []registry.Instance // sorted by service, ID
	// err is the problem with the file's current content (nil when it
	// is good); instances are then the last good ones.
	err error
	// gen counts changes of instances or err; changed is closed and
	// replaced on each.
	gen     uint64
	changed chan struct{}

	// File mode only.
	path    string
	content []byte
	log     *slog.Logger
	fsw     *fsnotify.Watcher
	cancel  context.CancelFunc
	done    chan struct{}
}

var _ registry.Discoverer = (*Registry)(nil)

// New serves a fixed list. Every instance must validate (registry.Instance
// Validate) and IDs must be unique within a service; the error names the
// first bad entry, as instances[N].field.
func New(instances []registry.Instance) (*Registry, error) {
	r := &Registry{changed: make(chan struct{})}
	if err := r.Replace(instances); err != nil {
		return nil, err
	}
	return r, nil
}

// Replace swaps the list for a new one, for a configuration reload. A bad
// list changes nothing.
func (r *Registry) Replace(instances []registry.Instance) error {
	list, err := checkList(instances)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set(list, nil)
	return nil
}

func checkList(instances []registry.Instance) ([]registry.Instance, error) {
	type key struct{ service, id string }
	seen := map[key]int{}
	for i, in := range instances {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("static: instances[%d].%w", i, err)
		}
		if j, dup := seen[key{in.Service, in.ID}]; dup {
			return nil, fmt.Errorf("static: instances[%d].id: %q repeats instances[%d] of service %q", i, in.ID, j, in.Service)
		}
		seen[key{in.Service, in.ID}] = i
	}
	list := append([]registry.Instance{}, instances...) // never nil: set reads nil as "keep"
	sortInstances(list)
	return list, nil
}

// set installs a new state (instances nil: keep the current ones) and
// wakes the watchers when something changed. r.mu must be held.
func (r *Registry) set(instances []registry.Instance, err error) {
	if instances == nil {
		instances = r.instances
	}
	if equalList(instances, r.instances) && sameErr(err, r.err) && r.gen > 0 {
		return
	}
	r.instances, r.err = instances, err
	r.gen++
	close(r.changed)
	r.changed = make(chan struct{})
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// NewFile reads path and watches it. The first read must succeed: there is
// nothing to serve otherwise. logger (default slog.Default()) gets a line
// for every reload and every rejected edit. Close stops the watching.
func NewFile(path string, logger *slog.Logger) (*Registry, error) {
	if logger == nil {
		logger = slog.Default()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("static: file: %w", err)
	}
	content, list, err := readFile(abs)
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("static: watching %s: %w", abs, err)
	}
	// Watch the directory, not the file: an atomic replace renames a new
	// file over the old one, and a watch on the old inode would go quiet.
	if err := fsw.Add(filepath.Dir(abs)); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("static: watching %s: %w", filepath.Dir(abs), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		changed: make(chan struct{}),
		path:    abs,
		content: content,
		log:     logger.With("registry", "static", "file", abs),
		fsw:     fsw,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	r.set(list, nil)
	go r.watchFile(ctx)
	return r, nil
}

func readFile(path string) ([]byte, []registry.Instance, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	content, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(content) > maxFileBytes {
		return nil, nil, fmt.Errorf("%s: larger than %d MiB", path, maxFileBytes>>20)
	}
	list, err := Parse(path, content)
	return content, list, err
}

// watchFile reloads the file a moment after changes in its directory
// settle, until ctx ends.
func (r *Registry) watchFile(ctx context.Context) {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	name := filepath.Base(r.path)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-r.fsw.Events:
			if !ok {
				return
			}
			// Our file, or a Kubernetes-style "..data" symlink swap
			// that changes what our file points to.
			if base := filepath.Base(ev.Name); base == name || (len(base) > 1 && base[:2] == "..") {
				timer.Reset(settle)
			}
		case err, ok := <-r.fsw.Errors:
			if !ok {
				return
			}
			r.log.Warn("static: file watch error; re-reading", "error", err)
			timer.Reset(settle)
		case <-timer.C:
			r.reload()
		}
	}
}

func (r *Registry) reload() {
	content, list, err := readFile(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && bytes.Equal(content, r.content) && r.err == nil {
		return
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("the file is gone: %w", err)
		}
		err = fmt.Errorf("static: %w", err)
		if !sameErr(err, r.err) {
			r.log.Warn("static: file rejected; keeping the previous instances", "error", err)
		}
		r.set(nil, err)
		return
	}
	r.content = content
	r.log.Info("static: file reloaded", "instances", len(list))
	r.set(list, nil)
}

// Err is the problem with the watched file's current content, or nil.
func (r *Registry) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close stops watching the file. It is idempotent; a Registry from New
// has nothing to close.
func (r *Registry) Close() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	<-r.done
	return r.fsw.Close()
}

func (r *Registry) selectFor(q registry.Query) []registry.Instance {
	out := []registry.Instance{}
	for _, in := range r.instances {
		if in.Service == q.Service && in.HasTags(q.Tags) {
			out = append(out, in)
		}
	}
	return out
}

// Instances returns the service's instances carrying every tag in q.Tags,
// sorted by ID: from the last good file content when the current one is
// bad.
func (r *Registry) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	if q.Service == "" {
		return nil, errors.New("static: service: must not be empty")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.selectFor(q), nil
}

// Watch starts a watch that lasts until Stop or the end of ctx.
func (r *Registry) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	if q.Service == "" {
		return nil, errors.New("static: service: must not be empty")
	}
	q.Tags = slices.Clone(q.Tags)
	wctx, cancel := context.WithCancel(ctx)
	return &watcher{r: r, q: q, ctx: wctx, cancel: cancel}, nil
}

type watcher struct {
	r      *Registry
	q      registry.Query
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	gen     uint64
	last    []registry.Instance
	lastErr error
	emitted bool
	// failed: the last Next returned an error (a rejected file, or its
	// ctx ended).
	failed bool
}

// Next returns the instances at once the first time; then it blocks until
// they change, or until the file is rejected, which it reports once as an
// error (the instances stay what they were).
//
// After an error, the next Next returns the instances as soon as the file
// is good (at once if it already is), changed or not, so that the caller
// stops calling its view stale (registry.Watcher's contract): an operator
// who reverts a bad edit, or fixes it in a way that leaves this query's
// instances as they were, must see the error end.
func (w *watcher) Next(ctx context.Context) (insts []registry.Instance, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { w.failed = err != nil }()
	for {
		if w.ctx.Err() != nil {
			return nil, errors.New("static: watch stopped")
		}
		w.r.mu.Lock()
		gen, changed, ferr, snap := w.r.gen, w.r.changed, w.r.err, w.r.selectFor(w.q)
		w.r.mu.Unlock()
		if !w.emitted || (w.failed && ferr == nil) {
			w.gen, w.last, w.lastErr, w.emitted = gen, snap, ferr, true
			return slices.Clone(snap), nil
		}
		if gen != w.gen {
			w.gen = gen
			if ferr != nil && !sameErr(ferr, w.lastErr) {
				w.lastErr = ferr
				return nil, ferr
			}
			w.lastErr = ferr
			if !equalList(snap, w.last) {
				w.last = snap
				return slices.Clone(snap), nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ctx.Done():
		}
	}
}

// Stop ends the watch; a blocked Next returns an error.
func (w *watcher) Stop() { w.cancel() }

func equalList(a, b []registry.Instance) bool {
	return slices.EqualFunc(a, b, func(x, y registry.Instance) bool {
		return x.ID == y.ID && x.Service == y.Service && x.Address == y.Address && x.Port == y.Port &&
			x.Weight == y.Weight && x.Zone == y.Zone && x.Health == y.Health &&
			slices.Equal(x.Tags, y.Tags) && maps.Equal(x.Meta, y.Meta)
	})
}
