// Package registries runs the registries a configuration names (the
// embedded one and the external consul, etcd, dns and static ones), each
// behind a discovery cache, and gives the upstreams their views.
package registries

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/config/registryopen"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// backend is one running registry behind its discovery cache.
type backend struct {
	name   string
	key    any // the settings it was built from
	disc   *discovery.Discovery
	closer func() error // releases the registry client; nil for none
}

func (b *backend) close() {
	b.disc.Close()
	if b.closer != nil {
		if err := b.closer(); err != nil {
			slog.Default().Debug("closing registry", "registry", b.name, "err", err)
		}
	}
}

// Manager owns the registries and the views handed to upstreams. A view
// follows its registry by name: when a reload changes a registry's
// settings, the registry is rebuilt and its views move to the new one.
type Manager struct {
	log      *slog.Logger
	metrics  *discovery.Metrics
	embedded registry.Discoverer

	// Lock order: Manager.mu, then a view's deliver, then its mu (and
	// the discovery views' own locks); subscribers (the upstreams) take
	// their locks inside deliver and never call back into the Manager.
	mu       sync.Mutex
	backends map[string]*backend
	// staged holds the registries a configuration being applied adds or
	// changes: Watch uses them, Commit makes them current, Rollback
	// closes them.
	staged map[string]*backend
	views  map[*view]struct{}
}

// New returns a Manager with no registries; metrics go to reg.
func New(log *slog.Logger, reg prometheus.Registerer) *Manager {
	return &Manager{log: log, metrics: discovery.NewMetrics(reg), backends: map[string]*backend{}, staged: map[string]*backend{}, views: map[*view]struct{}{}}
}

// SetEmbedded makes the embedded registry available as "embedded".
func (m *Manager) SetEmbedded(d registry.Discoverer) {
	m.mu.Lock()
	m.embedded = d
	m.mu.Unlock()
}

// Stage builds the registries of cfg that are new or whose settings
// changed, without touching the running ones: Watch hands out views of the
// staged registries, so the data plane can prepare cfg. Then Commit (the proxy
// applied cfg) or Rollback (it did not). On error nothing is staged.
func (m *Manager) Stage(cfg *config.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollbackLocked()
	type want struct {
		key   any
		build func(opts discovery.Options) (*backend, error)
	}
	wants := map[string]want{}
	if cfg.RegistryEnabled() && m.embedded != nil {
		emb := m.embedded
		wants[config.EmbeddedRegistry] = want{key: cfg.Discovery, build: func(o discovery.Options) (*backend, error) {
			d, err := discovery.New(emb, o)
			if err != nil {
				return nil, err
			}
			return &backend{disc: d}, nil
		}}
	}
	for name, rc := range cfg.Registries {
		rc := rc
		wants[name] = want{key: [2]any{*rc, cfg.Discovery}, build: func(o discovery.Options) (*backend, error) {
			d, closer, err := registryopen.Open(rc, m.log.With("registry", o.Registry))
			if err != nil {
				return nil, err
			}
			disc, err := discovery.New(d, o)
			if err != nil {
				if closer != nil {
					closer()
				}
				return nil, err
			}
			return &backend{disc: disc, closer: closer}, nil
		}}
	}
	for _, name := range sortedKeys(wants) {
		w := wants[name]
		if b := m.backends[name]; b != nil && reflect.DeepEqual(b.key, w.key) {
			continue
		}
		b, err := w.build(discovery.Options{
			Registry: name, CacheDir: cfg.Discovery.CacheDir, EmptyGrace: cfg.Discovery.EmptyGrace.Std(),
			Logger: m.log.With("registry", name), Metrics: m.metrics,
		})
		if err != nil {
			m.rollbackLocked()
			return fmt.Errorf("registry %q: %w", name, err)
		}
		b.name, b.key = name, w.key
		m.staged[name] = b
	}
	return nil
}

// Commit makes the staged registries current, moves the views of changed
// registries to them, and closes the registries cfg no longer names.
func (m *Manager) Commit(cfg *config.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, b := range m.staged {
		old := m.backends[name]
		m.backends[name] = b
		for v := range m.views {
			if v.registry == name {
				v.attach(b)
			}
		}
		if old != nil {
			old.close()
		}
	}
	m.staged = map[string]*backend{}
	for name, b := range m.backends {
		if name == config.EmbeddedRegistry && cfg.RegistryEnabled() {
			continue
		}
		if cfg.Registries[name] == nil {
			delete(m.backends, name)
			b.close()
		}
	}
}

// Rollback closes the staged registries; the running ones are untouched.
// Views handed out from them must have been closed by the failed apply.
func (m *Manager) Rollback() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollbackLocked()
}

func (m *Manager) rollbackLocked() {
	for name, b := range m.staged {
		delete(m.staged, name)
		b.close()
	}
}

// Apply stages cfg and commits it at once (for callers with nothing else
// to apply in between).
func (m *Manager) Apply(cfg *config.Config) error {
	if err := m.Stage(cfg); err != nil {
		return err
	}
	m.Commit(cfg)
	return nil
}

// WaitReady waits until every view has its first answer (from its
// registry or the disk cache) and has handed it to its upstream, or ctx
// ends; it returns the views still waiting. serve calls it once at start,
// so that it does not begin with empty pools while the registries answer.
func (m *Manager) WaitReady(ctx context.Context) (waiting []string) {
	m.mu.Lock()
	type pending struct {
		name string
		v    *discovery.View
	}
	var all []pending
	for v := range m.views {
		v.mu.Lock()
		all = append(all, pending{v.registry + "/" + v.q.Key(), v.view})
		v.mu.Unlock()
	}
	m.mu.Unlock()
	for _, p := range all {
		if err := p.v.Ready(ctx); err != nil {
			waiting = append(waiting, p.name)
		}
	}
	sort.Strings(waiting)
	return waiting
}

// Close closes every registry.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollbackLocked()
	for name, b := range m.backends {
		delete(m.backends, name)
		b.close()
	}
}

// Status lists every discovered service's state, for the admin API.
func (m *Manager) Status() []discovery.ServiceStatus {
	m.mu.Lock()
	bs := make([]*backend, 0, len(m.backends))
	for _, b := range m.backends {
		bs = append(bs, b)
	}
	m.mu.Unlock()
	var out []discovery.ServiceStatus
	for _, b := range bs {
		out = append(out, b.disc.Status()...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Registry != out[j].Registry {
			return out[i].Registry < out[j].Registry
		}
		return out[i].Service < out[j].Service
	})
	return out
}

// Watch returns a view of the query's instances from the named registry:
// of its staged version when a configuration is being applied, else of
// the running one. It does not wait for the registry; the view delivers
// nothing until the first answer (see WaitReady).
func (m *Manager) Watch(name string, q registry.Query) (upstream.View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.staged[name]
	if b == nil {
		b = m.backends[name]
	}
	if b == nil {
		if name == config.EmbeddedRegistry {
			return nil, errors.New(`registry "embedded" is not running: the registry block takes effect when switchboard starts; restart it`)
		}
		return nil, fmt.Errorf("registry %q is not running", name)
	}
	v := &view{m: m, registry: name, q: q, subs: map[int]func(discovery.Snapshot){}}
	m.views[v] = struct{}{}
	v.attach(b)
	return v, nil
}

// view is an upstream.View over the discovery view of whichever backend
// currently has its registry's name.
type view struct {
	m        *Manager
	registry string
	q        registry.Query

	deliver sync.Mutex // serialises calls to subscribers

	mu      sync.Mutex
	backend *backend
	view    *discovery.View
	unview  func()
	last    discovery.Snapshot // Version 0 until the first answer
	version uint64             // of the snapshots it delivers, across backends
	subs    map[int]func(discovery.Snapshot)
	nextID  int
	closed  bool
}

// attach moves v to b's view; m.mu is held.
func (v *view) attach(b *backend) {
	v.mu.Lock()
	if v.backend == b || v.closed {
		v.mu.Unlock()
		return
	}
	dv := b.disc.Watch(v.q)
	old, oldUn := v.view, v.unview
	v.view, v.backend = dv, b
	v.mu.Unlock()
	if oldUn != nil {
		oldUn()
	}
	un := dv.Subscribe(func(s discovery.Snapshot) { v.publish(dv, s) })
	v.mu.Lock()
	v.unview = un
	v.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (v *view) publish(from *discovery.View, s discovery.Snapshot) {
	v.deliver.Lock()
	defer v.deliver.Unlock()
	v.mu.Lock()
	if v.closed || v.view != from {
		v.mu.Unlock()
		return
	}
	if v.last.Version > 0 && reflect.DeepEqual(s.Instances, v.last.Instances) {
		v.mu.Unlock() // only the view's staleness changed: nothing to route differently
		return
	}
	v.version++
	s.Version = v.version
	v.last = s
	subs := make([]func(discovery.Snapshot), 0, len(v.subs))
	for _, id := range sortedKeys(v.subs) {
		subs = append(subs, v.subs[id])
	}
	v.mu.Unlock()
	for _, fn := range subs {
		fn(s)
	}
}

// Snapshot returns the last answer delivered; Version 0 before the first.
func (v *view) Snapshot() discovery.Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// Subscribe calls fn with the latest answer (if there is one yet) and then
// with every new one. After cancel returns, fn is not running and is not
// called again.
func (v *view) Subscribe(fn func(discovery.Snapshot)) (cancel func()) {
	v.deliver.Lock()
	v.mu.Lock()
	id := v.nextID
	v.nextID++
	v.subs[id] = fn
	last := v.last
	v.mu.Unlock()
	if last.Version > 0 {
		fn(last)
	}
	v.deliver.Unlock()
	return func() {
		v.deliver.Lock() // wait for a delivery in progress
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
		v.deliver.Unlock()
	}
}

// Close releases the view.
func (v *view) Close() {
	v.m.mu.Lock()
	delete(v.m.views, v)
	v.m.mu.Unlock()
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	v.closed = true
	dv, un := v.view, v.unview
	v.mu.Unlock()
	if un != nil {
		un()
	}
	if dv != nil {
		dv.Close()
	}
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
