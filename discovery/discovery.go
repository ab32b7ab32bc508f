package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/registry"
)

// Defaults for the zero values of Options.
const (
	DefaultRegistry   = "default"
	DefaultEmptyGrace = 30 * time.Second
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// ErrClosed is returned by Ready on a View of a closed Discovery.
var ErrClosed = errors.New("discovery: closed")

// Options tune a Discovery. The zero value is usable.
type Options struct {
	// Registry names the registry in logs, metrics and cache file names.
	// Default "default".
	Registry string
	// CacheDir keeps the last good view of every query on disk, written
	// atomically whenever it changes and loaded when a view starts. The
	// directory is created (0700) if missing. Default "": no cache.
	CacheDir string
	// EmptyGrace is how long a service that had instances keeps them when
	// the registry suddenly reports none. Default 30s; negative disables the
	// guard (an empty answer is published at once).
	EmptyGrace time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts after a
	// registry error: attempt n waits a uniform random time in
	// [0, min(MaxBackoff, MinBackoff·2^n)] ("full jitter"). Defaults 100ms
	// and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives one line per event worth an operator's attention.
	// Default slog.Default().
	Logger *slog.Logger
	// Metrics exports the views' state to Prometheus. Default nil: none.
	Metrics *Metrics

	// Seams for tests: the clock (now, and the empty-grace timer), the
	// backoff sleep and the jitter source.
	clock clock.Clock
	sleep func(ctx context.Context, d time.Duration) error
	rnd   func(n int64) int64
	// handled is called by a watch loop after it has dealt with a registry
	// outcome or a timer, so a test knows when to look.
	handled func()
}

// Validate reports the first field that makes the options unusable.
func (o Options) Validate() error {
	switch {
	case o.MinBackoff < 0:
		return fmt.Errorf("min_backoff: %v must not be negative", o.MinBackoff)
	case o.MaxBackoff < 0:
		return fmt.Errorf("max_backoff: %v must not be negative", o.MaxBackoff)
	}
	o = o.withDefaults()
	if o.MinBackoff > o.MaxBackoff {
		return fmt.Errorf("min_backoff: %v is above max_backoff %v", o.MinBackoff, o.MaxBackoff)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if o.EmptyGrace == 0 {
		o.EmptyGrace = DefaultEmptyGrace
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.clock == nil {
		o.clock = clock.Real
	}
	if o.sleep == nil {
		o.sleep = clock.Sleep
	}
	if o.rnd == nil {
		o.rnd = rand.Int64N
	}
	return o
}

// backoff is the wait before retry n (0 for the first retry): full jitter
// over an exponentially growing ceiling, so that many switchboards that lost
// the registry at once do not come back in step ("Exponential Backoff And
// Jitter", AWS Architecture Blog, 2015).
func (o Options) backoff(n int) time.Duration {
	ceil := o.MaxBackoff
	if n < 62 {
		if c := o.MinBackoff << n; c > 0 && c < ceil {
			ceil = c
		}
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(o.rnd(int64(ceil) + 1))
}

// Discovery hands out Views over one registry. It is safe for concurrent
// use.
type Discovery struct {
	reg   registry.Discoverer
	opts  Options
	log   *slog.Logger
	cache *persister // nil without CacheDir

	ctx    context.Context // ends with Close; parent of every watch loop
	cancel context.CancelFunc

	mu      sync.Mutex
	watches map[string]*watch // by Query.Key()
	closed  bool
	loops   sync.WaitGroup
}

// New returns a Discovery over d. It starts nothing until Watch.
func New(d registry.Discoverer, opts Options) (*Discovery, error) {
	if d == nil {
		return nil, errors.New("discovery: registry: must not be nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	opts = opts.withDefaults()
	disc := &Discovery{
		reg:     d,
		opts:    opts,
		log:     opts.Logger.With("registry", opts.Registry),
		watches: map[string]*watch{},
	}
	if opts.CacheDir != "" {
		p, err := newPersister(opts.CacheDir, opts.Registry, disc.log)
		if err != nil {
			return nil, fmt.Errorf("discovery: cache_dir: %w", err)
		}
		disc.cache = p
	}
	disc.ctx, disc.cancel = context.WithCancel(context.Background())
	if opts.Metrics != nil {
		opts.Metrics.add(disc)
	}
	return disc, nil
}

// Watch returns a View of q's instances. Views of queries with the same
// Key share one watch loop, which starts with the first View and stops when
// the last one is closed. Close the View when done with it.
func (d *Discovery) Watch(q registry.Query) *View {
	q.Tags = slices.Clone(q.Tags) // the caller may reuse its slice
	key := q.Key()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &View{w: closedWatch(d, q, key)}
	}
	w := d.watches[key]
	if w == nil {
		w = newWatch(d, q, key)
		d.watches[key] = w
		d.loops.Add(1)
		go w.run()
	}
	w.refs++
	return &View{w: w}
}

// release drops one reference to w and stops its loop with the last one.
func (d *Discovery) release(w *watch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w.refs--
	if w.refs > 0 {
		return
	}
	if d.watches[w.key] == w {
		delete(d.watches, w.key)
	}
	w.cancel()
}

// Status reports every watched query, sorted by service and key.
func (d *Discovery) Status() []ServiceStatus {
	d.mu.Lock()
	ws := make([]*watch, 0, len(d.watches))
	for _, w := range d.watches {
		ws = append(ws, w)
	}
	d.mu.Unlock()
	now := d.opts.clock.Now()
	out := make([]ServiceStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status(now))
	}
	slices.SortFunc(out, func(a, b ServiceStatus) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.key, b.key))
	})
	return out
}

// Close stops every watch loop, waits for them, and writes pending cache
// files. Views stay readable (their last snapshot) but change no more.
func (d *Discovery) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	d.watches = map[string]*watch{}
	d.mu.Unlock()
	d.cancel()
	d.loops.Wait()
	if d.cache != nil {
		d.cache.close()
	}
	if d.opts.Metrics != nil {
		d.opts.Metrics.remove(d)
	}
}

// ServiceStatus is one watched query's state, for the admin API.
type ServiceStatus struct {
	Registry    string   `json:"registry"`
	Service     string   `json:"service"`
	Tags        []string `json:"tags,omitempty"`
	PassingOnly bool     `json:"passing_only"`
	// Instances is the number of instances the view serves.
	Instances int `json:"instances"`
	// Stale: the last attempt failed, or the view came from the disk cache
	// and the registry has not answered yet, or the empty guard holds it.
	Stale bool `json:"stale"`
	// AgeSeconds is 0 while the registry answers; otherwise the time since
	// it stopped answering, or, for a view loaded from disk, since the
	// cached view was written.
	AgeSeconds float64 `json:"age_seconds"`
	// LastError is the registry's most recent error ("" if none since the
	// view started); LastErrorAt is when it happened.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Errors counts failed attempts since the view started.
	Errors uint64 `json:"errors"`
	// FromCache: the instances were loaded from CacheDir and the registry
	// has not confirmed them yet.
	FromCache bool `json:"from_cache"`
	// EmptyGuard: the registry reports no instances and the previous ones
	// are kept until EmptyGraceUntil.
	EmptyGuard      bool       `json:"empty_guard"`
	EmptyGraceUntil *time.Time `json:"empty_grace_until,omitempty"`
	// Version is the view's snapshot version.
	Version uint64 `json:"version"`
	// UpdatedAt is the last successful answer from the registry.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`

	key string
}
