package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/registry"
)

// DefaultLoadHeader is the response header in which an endpoint may report
// its own load ("cpu=0.42, mem=0.31") when Balance.DynamicWeight.Header is
// not set. A front end hands it back in the Outcome and does not pass it on.
const DefaultLoadHeader = "X-Switchboard-Load"

// Config is what an upstream is made of. The zero value is a round-robin
// upstream with no endpoints and no health checking. The yaml tags are the
// keys of an upstream (docs/configuration.md).
type Config struct {
	// Balance chooses an endpoint per request: the policy and its
	// settings. Default round_robin. Keys: balance.Config
	// (docs/balancing.md).
	Balance balance.Config `yaml:"balance"`
	// Targets are the static endpoints. Keys: endpoint.Spec (address, id,
	// weight, zone). Ignored when View is set.
	Targets []endpoint.Spec `yaml:"targets"`
	// View, when set, supplies the endpoints from a registry instead of
	// Targets. The upstream owns it from then on: it closes the view when
	// it is closed, or when a later configuration follows another view.
	View View `yaml:"-"`
	// RequirePassing, with View, keeps an instance the registry calls
	// warning out of traffic, as it does a critical one: both stay in the
	// pool, visible with their counters, in state unhealthy with the
	// registry's verdict as the reason ("registry: warning"). Without it
	// a warning instance takes traffic (as Consul's DNS interface does).
	// The proxy sets it for discovery's passing_only (the default).
	RequirePassing bool `yaml:"-"`
	// Health configures active checks, passive ejection and panic mode.
	Health Health `yaml:"health"`
	// Breaker gives every endpoint a circuit breaker of its own: an open
	// breaker puts its endpoint in the breaker_open state, and picks skip
	// it. Keys: docs/breaker.md.
	Breaker *breaker.Config `yaml:"breaker"`
	// Concurrency caps the requests in flight to this upstream from every
	// caller together, with an optional bounded queue; a request over the
	// cap gets 503 concurrency_limited. Keys: ratelimit.ConcurrencyConfig.
	Concurrency *ratelimit.ConcurrencyConfig `yaml:"concurrency"`
}

// Health configures how endpoints are judged. docs/health.md describes the
// states and how the signals combine.
type Health struct {
	// Active probes every endpoint on a schedule. Default off. Keys:
	// health.ActiveConfig.
	Active *health.ActiveConfig `yaml:"active"`
	// Passive ejects endpoints that fail real requests (outlier
	// detection). Default off. Keys: health.PassiveConfig.
	Passive *health.PassiveConfig `yaml:"passive"`
	// PanicThreshold, when the share of endpoints that can take traffic
	// falls below it (0 to 1), sends traffic to every endpoint rather than
	// crush the survivors. Default 0: off.
	PanicThreshold float64 `yaml:"panic_threshold"`
}

// Validate reports every problem in h, each as a field.Error naming its
// key (active.interval, passive.window, panic_threshold).
func (h Health) Validate() error {
	var errs []error
	if h.Active != nil {
		errs = append(errs, field.Prefix("active", h.Active.Validate()))
	}
	if h.Passive != nil {
		errs = append(errs, field.Prefix("passive", h.Passive.Validate()))
	}
	if t := h.PanicThreshold; t < 0 || t > 1 {
		errs = append(errs, field.Errorf("panic_threshold", "must be between 0 and 1, got %v", t))
	}
	return errors.Join(errs...)
}

// Validate reports every problem in c, each as a field.Error naming its
// key ("balance.hash_key", "health.passive.window", "breaker.open_for").
// Targets are not judged: their addresses are whatever the caller dials.
func (c Config) Validate() error {
	errs := []error{field.Prefix("balance", c.Balance.Validate()), field.Prefix("health", c.Health.Validate())}
	if c.Breaker != nil {
		errs = append(errs, field.Prefix("breaker", c.Breaker.Validate()))
	}
	if c.Concurrency != nil {
		errs = append(errs, field.Prefix("concurrency", c.Concurrency.Validate()))
	}
	return errors.Join(errs...)
}

// View is a live answer of a registry: a *discovery.View, or anything that
// delivers discovery snapshots the same way.
type View interface {
	// Snapshot returns the latest answer; Version 0 means none yet.
	Snapshot() discovery.Snapshot
	// Subscribe calls fn with the latest answer, if there is one, and then
	// with every new one, never concurrently. After cancel returns fn is
	// not running and is not called again.
	Subscribe(fn func(discovery.Snapshot)) (cancel func())
	// Close releases the view.
	Close()
}

// Option tunes New.
type Option func(*Upstream)

// WithLogger sets the logger for state changes and panic mode. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(u *Upstream) { u.log = l } }

// WithMetrics counts state changes in m (see NewMetrics). Default: none.
func WithMetrics(m *Metrics) Option { return func(u *Upstream) { u.metrics = m } }

// Upstream is one named upstream: its pool of endpoints, the balancer over
// it, the health machinery and the discovery subscription that keep the
// pool right, and its concurrency limit. It is safe for concurrent use, and
// stays the same value across configuration changes (Prepare), so callers
// may keep it.
type Upstream struct {
	name    string
	log     *slog.Logger
	metrics *Metrics
	pool    *endpoint.Pool

	mu     sync.Mutex // serialises Prepare's Commit and Close
	closed bool
	epMu   sync.Mutex // orders membership changes (configuration, view)
	cur    atomic.Pointer[generation]
}

// generation is one configuration of an upstream, with the parts built
// from it. Parts whose settings a new configuration keeps are shared by
// the next generation.
type generation struct {
	cfg        Config
	bal        balance.Balancer
	hashKey    *balance.HashKey
	loadHeader string
	limit      *ratelimit.Concurrency
	signals    *signals // nil: no health machinery
	guard      *panicGuard

	unsub   func()             // stops feeding bal from the pool
	stopRun context.CancelFunc // stops bal's background work; nil for none
	unview  func()             // stops following cfg.View
}

// New builds an upstream from cfg and starts it: its endpoints are in the
// pool and its checks run when New returns. Close stops it.
func New(name string, cfg Config, opts ...Option) (*Upstream, error) {
	c, err := Build(name, cfg, opts...)
	if err != nil {
		return nil, err
	}
	c.Commit()
	return c.Upstream(), nil
}

// Build builds an upstream from cfg without starting it: the Change's
// Commit starts it, Discard drops it. Until Commit the upstream must not
// be used. For callers that prepare several things before they start any
// (a configuration reload).
func Build(name string, cfg Config, opts ...Option) (*Change, error) {
	u := &Upstream{name: name, log: slog.Default(), pool: endpoint.NewPool(name)}
	for _, o := range opts {
		o(u)
	}
	return u.Prepare(cfg)
}

// Name is the upstream's name.
func (u *Upstream) Name() string { return u.name }

// Pool is the upstream's endpoint pool.
func (u *Upstream) Pool() *endpoint.Pool { return u.pool }

// Config returns the configuration in effect.
func (u *Upstream) Config() Config { return u.cur.Load().cfg }

// Policy is the balancing policy's name.
func (u *Upstream) Policy() string { return u.cur.Load().cfg.Balance.Policy }

// Pick chooses an endpoint. The Result's Done must be called exactly once
// with the outcome; it feeds in-flight counts, latency, passive health and
// the endpoint's breaker. Pick takes no lock and does not allocate.
//
// With info.Prefer set, that endpoint is the pick while the policy could
// pick it (it can take traffic, or the upstream is in panic) and it is not
// in info.Tried; otherwise the policy picks. A preferred pick feeds the
// endpoint's in-flight count, passive health and breaker, but not a
// policy's own tracking (p2c_ewma's latency, dynamic_weight's load).
func (u *Upstream) Pick(info *balance.Info) (balance.Result, error) {
	g := u.cur.Load()
	if info != nil && info.Prefer != nil {
		if ep := info.Prefer; !balance.Tried(info.Tried, ep) && slices.Contains(g.guard.picking(), ep) {
			ep.Acquire()
			return balance.Result{Endpoint: ep, Done: ep.DoneFunc()}, nil
		}
	}
	return g.bal.Pick(info)
}

// HashKey says where a request's key for a hashing policy is found, or is
// nil when the policy needs none.
func (u *Upstream) HashKey() *balance.HashKey { return u.cur.Load().hashKey }

// LoadHeader is the response header that carries endpoints' load reports.
func (u *Upstream) LoadHeader() string { return u.cur.Load().loadHeader }

// Concurrency is the upstream's concurrency limit, or nil for none.
func (u *Upstream) Concurrency() *ratelimit.Concurrency { return u.cur.Load().limit }

// Untried reports whether an endpoint the balancer may pick now is not in
// tried: whether a retry can go somewhere new. In panic mode every endpoint
// may be picked.
func (u *Upstream) Untried(tried []*endpoint.Endpoint) bool {
	for _, ep := range u.cur.Load().guard.picking() {
		if !balance.Tried(tried, ep) {
			return true
		}
	}
	return false
}

// Change is a prepared configuration of an upstream: Commit applies it,
// Discard drops it. Exactly one of them must be called.
type Change struct {
	u    *Upstream
	base *generation // the configuration it was prepared from
	next *generation
	done bool
}

// Prepare builds what cfg needs without changing anything that runs: the
// upstream keeps serving on its current configuration until Commit. One
// Change at a time: prepare, then commit or discard, before the next
// Prepare (Commit panics on a Change whose base another replaced). The
// pool, and with it every endpoint's live state, is always kept; so is
// each part (balancer, health checks, concurrency limit, view) whose
// settings cfg does not change. On error nothing was changed, and cfg.View
// is the caller's to close.
func (u *Upstream) Prepare(cfg Config) (*Change, error) {
	prev := u.cur.Load()
	g := &generation{cfg: cfg}
	if err := u.build(g, prev); err != nil {
		return nil, err
	}
	return &Change{u: u, base: prev, next: g}, nil
}

func (u *Upstream) build(g, prev *generation) error {
	if err := g.cfg.Validate(); err != nil {
		return err
	}
	cfg := g.cfg
	if g.cfg.Balance.Policy == "" {
		g.cfg.Balance.Policy = balance.DefaultPolicy
	}
	if prev != nil && reflect.DeepEqual(prev.cfg.Balance, g.cfg.Balance) {
		g.bal = prev.bal
	} else {
		b, err := balance.New(g.cfg.Balance)
		if err != nil {
			return fmt.Errorf("balance: %w", err)
		}
		g.bal = b
	}
	if s := cfg.Balance.HashKey; s != "" {
		k, err := balance.ParseHashKey(s)
		if err != nil {
			return fmt.Errorf("balance: %w", err)
		}
		g.hashKey = &k
	}
	g.loadHeader = textproto.CanonicalMIMEHeaderKey(cfg.Balance.DynamicWeight.Header)
	if g.loadHeader == "" {
		g.loadHeader = DefaultLoadHeader
	}
	if c := cfg.Concurrency; c != nil {
		if prev != nil && prev.limit != nil && *prev.cfg.Concurrency == *c {
			g.limit = prev.limit
		} else {
			l, err := ratelimit.NewConcurrency(*c)
			if err != nil {
				return fmt.Errorf("concurrency: %w", err)
			}
			g.limit = l
		}
	}
	if prev != nil && reflect.DeepEqual(prev.cfg.Health, cfg.Health) && reflect.DeepEqual(prev.cfg.Breaker, cfg.Breaker) &&
		(prev.cfg.View != nil) == (cfg.View != nil) && prev.cfg.RequirePassing == cfg.RequirePassing {
		g.signals = prev.signals
	} else {
		s, err := newSignals(u, cfg.Health, cfg.Breaker, cfg.View != nil, cfg.RequirePassing)
		if err != nil {
			return err
		}
		g.signals = s
	}
	return nil
}

// Upstream is the upstream the change is for.
func (c *Change) Upstream() *Upstream { return c.u }

// Commit makes the prepared configuration the upstream's. Parts of the
// previous one that the new one does not keep are stopped.
func (c *Change) Commit() {
	if c.done {
		panic("upstream: Change used twice")
	}
	c.done = true
	u := c.u
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		c.next.discard(nil)
		return
	}
	if cur := u.cur.Load(); cur != c.base {
		// Built from a configuration that another Change has replaced: it
		// would restart what that one stopped.
		panic("upstream: Commit of a Change prepared before another was committed")
	}
	u.activate(c.next, c.base)
}

// Discard drops a prepared configuration that will not be committed: what
// Prepare built for it alone is released (including a view that the
// current configuration does not follow).
func (c *Change) Discard() {
	if c.done {
		panic("upstream: Change used twice")
	}
	c.done = true
	c.next.discard(c.u.cur.Load())
}

// discard releases what g holds that prev does not share.
func (g *generation) discard(prev *generation) {
	if g.cfg.View != nil && (prev == nil || prev.cfg.View != g.cfg.View) {
		g.cfg.View.Close()
	}
}

// activate starts g in place of prev (nil at first).
func (u *Upstream) activate(g, prev *generation) {
	samePanic := prev != nil && prev.cfg.Health.PanicThreshold == g.cfg.Health.PanicThreshold
	if prev != nil && prev.bal == g.bal && samePanic {
		g.unsub, g.stopRun, g.guard = prev.unsub, prev.stopRun, prev.guard
	} else {
		if prev != nil {
			prev.unsub()
			if prev.bal == g.bal {
				g.stopRun = prev.stopRun // only the panic threshold changed
			} else if prev.stopRun != nil {
				prev.stopRun()
			}
		}
		g.guard = &panicGuard{u: u, threshold: g.cfg.Health.PanicThreshold, next: g.bal.Update}
		g.unsub = u.pool.Subscribe(g.guard.update)
		if r, ok := g.bal.(balance.Runner); ok && g.stopRun == nil {
			ctx, cancel := context.WithCancel(context.Background())
			g.stopRun = cancel
			go r.Run(ctx)
		}
	}
	if prev != nil {
		if prev.unview != nil {
			prev.unview() // g follows the view from here on
		}
		if v := prev.cfg.View; v != nil && v != g.cfg.View {
			v.Close()
		}
		if prev.signals != nil && prev.signals != g.signals {
			prev.signals.close(u.pool.Snapshot().All, "health checking reconfigured")
		}
	}
	u.cur.Store(g)
	if g.signals != nil && (prev == nil || prev.signals != g.signals) {
		defer g.signals.start()
	}
	if v := g.cfg.View; v != nil {
		if v.Snapshot().Version == 0 {
			// No answer yet (a registry down with no disk cache): keep the
			// endpoints the upstream had, under this generation's checks,
			// until the registry answers.
			u.setEndpoints(g, poolSpecs(u.pool), nil)
		}
		g.unview = v.Subscribe(func(s discovery.Snapshot) {
			u.setEndpoints(g, discovery.Specs(s.Instances), registryHealth(s.Instances))
		})
	} else {
		u.setEndpoints(g, g.cfg.Targets, nil)
	}
}

// Close stops the upstream: its balancer's background work, its checks and
// its view. Endpoints get back their healthy state (nothing judges them
// any more). Picks still work on the last snapshot.
func (u *Upstream) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.closed = true
	g := u.cur.Load()
	if g == nil {
		return
	}
	g.unsub()
	if g.stopRun != nil {
		g.stopRun()
	}
	if g.unview != nil {
		g.unview()
	}
	if g.cfg.View != nil {
		g.cfg.View.Close()
	}
	if g.signals != nil {
		g.signals.close(u.pool.Snapshot().All, "upstream removed")
	}
}

// setEndpoints makes specs the pool's membership under generation g; the
// health machinery follows, and registry verdicts (discovery) are applied.
func (u *Upstream) setEndpoints(g *generation, specs []endpoint.Spec, verdicts map[string]registry.Health) {
	u.epMu.Lock()
	defer u.epMu.Unlock()
	u.pool.Update(specs)
	all := u.pool.Snapshot().All
	if g.signals == nil {
		return
	}
	g.signals.sync(all)
	if verdicts != nil {
		now := time.Now()
		for _, ep := range all {
			g.signals.onRegistry(ep, verdicts[ep.Address()], now)
		}
	}
}

// registryHealth maps each instance address to the registry's verdict.
func registryHealth(in []registry.Instance) map[string]registry.Health {
	out := make(map[string]registry.Health, len(in))
	for _, i := range in {
		if _, dup := out[i.HostPort()]; !dup {
			out[i.HostPort()] = i.Health
		}
	}
	return out
}

// poolSpecs are the specs of the pool's current endpoints.
func poolSpecs(p *endpoint.Pool) []endpoint.Spec {
	all := p.Snapshot().All
	out := make([]endpoint.Spec, len(all))
	for i, ep := range all {
		out[i] = ep.Spec()
	}
	return out
}
