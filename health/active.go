package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Check types accepted by ActiveConfig.Type.
const (
	TypeHTTP = "http"
	TypeTCP  = "tcp"
	TypeGRPC = "grpc"
)

// ActiveConfig configures active health checks for one pool. The yaml tags
// are the keys of an upstream's health.active block, and the field comments
// are their reference. A zero field takes its default (WithDefaults fills
// them in; DefaultActiveConfig is all of them); Validate, NewChecker and
// NewMonitor report every problem as a *field.Error naming the key.
type ActiveConfig struct {
	// Type is the check: http (the default), tcp or grpc
	// (grpc.health.v1).
	Type string `yaml:"type"`

	// Method, Path and Host of an HTTP check (see HTTPCheck). Default
	// GET /, with the endpoint's address as Host. A grpc check sends Host,
	// if set, as the :authority.
	Method string `yaml:"method"`
	Path   string `yaml:"path"`
	Host   string `yaml:"host"`
	// ExpectStatus is the passing statuses of an HTTP check, as "200-399"
	// or "200,204,300-308". Default 200-399.
	ExpectStatus string `yaml:"expect_status"`
	// ExpectBody, when set, must appear in the first 64 KiB of the body.
	ExpectBody string `yaml:"expect_body"`

	// GRPCService is the service name a grpc check asks about; empty (the
	// default) asks about the server as a whole.
	GRPCService string `yaml:"grpc_service"`

	// Interval is the time between the end of one check and the start of
	// the next while the endpoint is healthy. Default 5s. Below 1s it needs
	// AllowFast.
	Interval time.Duration `yaml:"interval"`
	// AllowFast permits an Interval under 1s. A sub-second interval is
	// almost always a test setting that leaked into production: with many
	// upstreams, proxies and a shared backend, it turns health checks into
	// the backend's main load. Default false.
	AllowFast bool `yaml:"allow_fast"`
	// Timeout bounds one check; it must be below Interval. Default 2s, or
	// half the interval when that is 2s or less.
	Timeout time.Duration `yaml:"timeout"`
	// Rise is how many consecutive passes make an unhealthy endpoint
	// healthy. Default 2.
	Rise int `yaml:"rise"`
	// Fall is how many consecutive failures make a healthy endpoint
	// unhealthy. Default 3.
	Fall int `yaml:"fall"`
	// Jitter, a fraction of the interval in [0, 1), spreads checks: the
	// first check of each endpoint starts at a random offset in
	// [0, Jitter×Interval), and every later wait is varied by ±Jitter/2 of
	// itself, so that N endpoints are not probed at the same instant.
	// Default (nil) 0.1; 0 turns jitter off, which is why it is a pointer.
	Jitter *float64 `yaml:"jitter"`
	// UnhealthyInterval is the first wait after a failure while unhealthy;
	// each further failure doubles it, up to MaxBackoff, so that a dead host
	// is not hammered. Default: Interval.
	UnhealthyInterval time.Duration `yaml:"unhealthy_interval"`
	// MaxBackoff caps the unhealthy backoff. Default 60s.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Adaptive stretches the healthy interval of an endpoint that keeps
	// passing: after every StretchAfter consecutive passes the interval
	// doubles, up to MaxInterval. Any failure signal (a failed check, or
	// Nudge from passive health) snaps it back to Interval. Default (nil)
	// true; false turns it off, which is why it is a pointer.
	Adaptive *bool `yaml:"adaptive"`
	// MaxInterval is the longest the adaptive interval stretches to.
	// Default 4×Interval, but at most 1m (and never below Interval): a
	// silent failure of a long-healthy endpoint is then found within
	// MaxInterval + (Fall-1)×Interval (30s at the defaults, against 15s
	// with adaptive false), while its steady probe load drops to a
	// quarter. It must not be set with adaptive: false.
	MaxInterval time.Duration `yaml:"max_interval"`
	// StretchAfter is how many consecutive passes stretch the adaptive
	// interval once. Default 10.
	StretchAfter int `yaml:"stretch_after"`

	// TLS, when set, makes the checks speak TLS with it, as the traffic
	// to a TLS upstream does: an http check over https, a grpc check over
	// HTTP/2 over TLS, and a tcp check completes a TLS handshake (a
	// certificate that does not verify fails it). Its ServerName, when
	// empty, is the endpoint's host. Not a YAML key: the integrator passes
	// the upstream's TLS settings (see TLSCheck).
	TLS *tls.Config `yaml:"-"`
}

// Defaults of ActiveConfig.
const (
	DefaultMethod       = "GET"
	DefaultPath         = "/"
	DefaultInterval     = 5 * time.Second
	DefaultTimeout      = 2 * time.Second
	DefaultRise         = 2
	DefaultFall         = 3
	DefaultJitter       = 0.1
	DefaultMaxBackoff   = 60 * time.Second
	DefaultStretchAfter = 10
	// DefaultMaxIntervalFactor and DefaultMaxIntervalCap make the default
	// MaxInterval: min(4×Interval, 1m), and at least Interval.
	DefaultMaxIntervalFactor = 4
	DefaultMaxIntervalCap    = time.Minute
	// FastInterval is the shortest Interval allowed without AllowFast.
	FastInterval = time.Second
)

// DefaultActiveConfig returns the defaults documented on ActiveConfig, all
// filled in.
func DefaultActiveConfig() ActiveConfig { return ActiveConfig{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c ActiveConfig) WithDefaults() ActiveConfig {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Type, TypeHTTP)
	def(&c.Method, DefaultMethod)
	def(&c.Path, DefaultPath)
	def(&c.ExpectStatus, DefaultExpectStatus)
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
		if c.Timeout >= c.Interval {
			c.Timeout = c.Interval / 2 // the default must fit a short interval
		}
	}
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	if c.Jitter == nil {
		c.Jitter = new(DefaultJitter)
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.StretchAfter == 0 {
		c.StretchAfter = DefaultStretchAfter
	}
	if c.Adaptive == nil {
		c.Adaptive = new(true)
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = c.Interval
		if *c.Adaptive {
			c.MaxInterval = max(min(DefaultMaxIntervalFactor*c.Interval, DefaultMaxIntervalCap), c.Interval)
		}
	}
	return c
}

// Validate reports every problem in c, or nil: a *field.Error per problem,
// joined, each naming its yaml key.
func (c ActiveConfig) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	switch c.Type {
	case "", TypeHTTP, TypeTCP, TypeGRPC:
	default:
		bad("type", "unknown check type %q (want %q, %q or %q)", c.Type, TypeHTTP, TypeTCP, TypeGRPC)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"interval", c.Interval}, {"timeout", c.Timeout}, {"unhealthy_interval", c.UnhealthyInterval}, {"max_backoff", c.MaxBackoff}, {"max_interval", c.MaxInterval}} {
		if d.v < 0 {
			bad(d.key, "must not be negative, got %v", d.v)
		}
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"rise", c.Rise}, {"fall", c.Fall}, {"stretch_after", c.StretchAfter}} {
		if n.v < 0 {
			bad(n.key, "must be at least 1, got %d", n.v)
		}
	}
	if j := c.Jitter; j != nil && !(*j >= 0 && *j < 1) {
		bad("jitter", "must be in [0, 1), got %v", *j)
	}
	if (c.Type == "" || c.Type == TypeHTTP) && c.ExpectStatus != "" {
		if _, err := ParseStatusRanges(c.ExpectStatus); err != nil {
			bad("expect_status", "%v", err)
		}
	}
	// The settings that bound each other, with their defaults.
	d := c.WithDefaults()
	if c.Interval >= 0 && c.Timeout >= 0 && d.Timeout >= d.Interval {
		bad("timeout", "%v must be below interval %v", d.Timeout, d.Interval)
	}
	if c.Interval >= 0 && c.UnhealthyInterval >= 0 && c.MaxBackoff >= 0 && d.MaxBackoff < d.unhealthyInterval() {
		bad("max_backoff", "%v must be at least unhealthy_interval %v", d.MaxBackoff, d.unhealthyInterval())
	}
	if c.Interval >= 0 && c.MaxInterval > 0 && d.MaxInterval < d.Interval {
		bad("max_interval", "%v must be at least interval %v", d.MaxInterval, d.Interval)
	}
	if c.Interval > 0 && c.Interval < FastInterval && !c.AllowFast {
		bad("interval", "%v is under %v: probing this often needs allow_fast: true", c.Interval, FastInterval)
	}
	if c.Adaptive != nil && !*c.Adaptive && c.MaxInterval > 0 && c.MaxInterval != d.Interval {
		bad("max_interval", "%v is set but adaptive is false (the interval never stretches)", c.MaxInterval)
	}
	return errors.Join(errs...)
}

func (c ActiveConfig) unhealthyInterval() time.Duration {
	if c.UnhealthyInterval == 0 {
		return c.Interval
	}
	return c.UnhealthyInterval
}

func (c ActiveConfig) maxInterval() time.Duration {
	return max(c.MaxInterval, c.Interval)
}

// jitter is c.Jitter, or its default when nil.
func (c ActiveConfig) jitter() float64 {
	if c.Jitter == nil {
		return DefaultJitter
	}
	return *c.Jitter
}

// NewChecker builds the Checker that c describes.
func (c ActiveConfig) NewChecker() (Checker, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	switch c.Type {
	case TypeTCP:
		return TCPCheck{TLS: c.TLS}, nil
	case TypeGRPC:
		return &GRPCCheck{Service: c.GRPCService, Authority: c.Host, TLS: c.TLS}, nil
	}
	h := &HTTPCheck{Method: c.Method, Path: c.Path, Host: c.Host, Body: c.ExpectBody, TLS: c.TLS}
	if c.ExpectStatus != "" {
		h.Expect, _ = ParseStatusRanges(c.ExpectStatus) // validated above
	}
	return h, nil
}

// tracker turns consecutive check results into verdicts. It is pure: the
// Monitor feeds it results in order.
type tracker struct {
	rise, fall int
	kind       string // "HTTP", "TCP": for reasons
	healthy    bool
	passes     int // consecutive
	fails      int // consecutive
}

// observe records one result. When the verdict changes it returns changed
// with the new verdict's reason.
func (t *tracker) observe(err error) (changed bool, reason string) {
	if err == nil {
		t.passes++
		t.fails = 0
		if !t.healthy && t.passes >= t.rise {
			t.healthy = true
			return true, fmt.Sprintf("%d consecutive %s check passes", t.passes, t.kind)
		}
		return false, ""
	}
	t.fails++
	t.passes = 0
	if t.healthy && t.fails >= t.fall {
		t.healthy = false
		return true, fmt.Sprintf("%d consecutive %s check failures: %v", t.fails, t.kind, err)
	}
	return false, ""
}

// schedule decides how long to wait before an endpoint's next check. It is
// pure apart from rnd, which tests replace; durations are relative to the end
// of the previous check, so it needs no clock.
type schedule struct {
	cfg ActiveConfig
	rnd func() float64 // uniform in [0, 1)

	interval time.Duration // current healthy interval (adaptive)
	streak   int           // consecutive passes since interval last changed
	backoff  time.Duration // current unhealthy wait; 0 when not backing off
}

func newSchedule(cfg ActiveConfig, rnd func() float64) *schedule {
	if rnd == nil {
		rnd = rand.Float64
	}
	return &schedule{cfg: cfg, rnd: rnd, interval: cfg.Interval}
}

// first is the offset of an endpoint's first check, spread over the jitter
// window so that endpoints added together are not probed together.
func (s *schedule) first() time.Duration {
	return time.Duration(s.rnd() * s.cfg.jitter() * float64(s.cfg.Interval))
}

// next returns the wait before the next check, given whether the last check
// passed and the verdict after it.
func (s *schedule) next(passed, healthy bool) time.Duration {
	return s.jitter(s.base(passed, healthy))
}

// base is next without jitter.
func (s *schedule) base(passed, healthy bool) time.Duration {
	if !passed {
		s.interval, s.streak = s.cfg.Interval, 0
		if healthy {
			// Still counting towards Fall: keep probing at the base rate.
			return s.interval
		}
		if s.backoff == 0 {
			s.backoff = s.cfg.unhealthyInterval()
		} else {
			s.backoff = min(2*s.backoff, s.cfg.MaxBackoff)
		}
		return s.backoff
	}
	s.backoff = 0
	if !healthy {
		// Counting towards Rise: confirm recovery without backoff.
		return s.cfg.unhealthyInterval()
	}
	s.streak++
	if s.streak >= s.cfg.StretchAfter && s.interval < s.cfg.maxInterval() {
		s.interval = min(2*s.interval, s.cfg.maxInterval())
		s.streak = 0
	}
	return s.interval
}

// nudge is a failure signal from outside (passive health): the adaptive
// interval snaps back to Interval.
func (s *schedule) nudge() { s.interval, s.streak = s.cfg.Interval, 0 }

func (s *schedule) jitter(d time.Duration) time.Duration {
	j := s.cfg.jitter()
	if j == 0 {
		return d
	}
	return d + time.Duration((s.rnd()-0.5)*j*float64(d))
}

// OnChangeFunc receives an endpoint's active-check verdict when it changes:
// healthy false after Fall consecutive failures, true after Rise consecutive
// passes from unhealthy. now is when the deciding check ended. A check that
// was running when its endpoint left may still report once.
type OnChangeFunc func(ep *endpoint.Endpoint, healthy bool, reason string, now time.Time)

// Monitor runs active checks for a changing set of endpoints and reports
// verdict changes to its OnChangeFunc.
//
// The Monitor never calls SetStatus: an endpoint's state also depends on
// passive health, its breaker and draining, so the integrator combines the
// verdicts, sets the state, and refreshes the pool.
//
// An endpoint is taken as healthy when its checks begin unless its state is
// already Unhealthy, so adding endpoints does not empty a pool while the
// first checks run. Each check gets its own Timeout; a Checker that ignores
// its context delays only its own endpoint (and Close).
//
// # One probe per address
//
// Monitors whose checker is built from their config (no WithChecker) share
// probes process-wide: every Monitor that checks the same address with an
// equal ActiveConfig (after defaults: the check, its timeout and its
// schedule alike) subscribes to one probe stream, and each sees every
// result. Two upstreams listing the same backend, or a reload's old and
// new upstream, probe it once. Each subscriber keeps its own verdict and
// callbacks; a Nudge from any of them applies to the stream. The stream
// runs while it has subscribers and stops when the last one leaves. Configs
// that differ in anything, even the interval, probe separately: no Monitor
// is ever probed on a schedule other than its own.
type Monitor struct {
	cfg      ActiveConfig
	checker  Checker
	shared   bool // checker built from cfg: probes are shared (sharedStreams)
	kind     string
	onChange OnChangeFunc
	onPass   func(ep *endpoint.Endpoint, now time.Time)
	clock    clock.Clock // clock.Real; tests pass a clock.Fake (withClock)
	log      *slog.Logger

	mu     sync.Mutex
	ctx    context.Context // nil until Start
	cancel context.CancelFunc
	closed bool
	probes map[string]*probe // by address
	wg     sync.WaitGroup

	running atomic.Int64 // probe goroutines alive, for tests
}

// probe is one endpoint of a Monitor: its subscription to a stream.
type probe struct {
	ep     *endpoint.Endpoint
	cancel context.CancelFunc

	mu sync.Mutex // held while a result is delivered, and to turn it off
	// stream is set while subscribed (guarded by mu).
	stream *stream
	off    bool // no more deliveries
	t      tracker
}

// Option changes a Monitor's defaults.
type Option func(*Monitor)

// WithChecker replaces the checker built from the config's Type. Such a
// Monitor's probes are its own, never shared with other Monitors.
func WithChecker(c Checker) Option { return func(m *Monitor) { m.checker = c } }

// WithLogger sets the logger for verdict changes (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(m *Monitor) { m.log = l } }

// WithOnPass sets a function called after every passing check of an
// endpoint whose verdict is healthy, not only when the verdict changes:
// an endpoint that passive health ejected while its checks kept passing
// (an outage shorter than fall checks) hears of each pass.
func WithOnPass(fn func(ep *endpoint.Endpoint, now time.Time)) Option {
	return func(m *Monitor) { m.onPass = fn }
}

// withClock makes the Monitor read time and arm its timers on c, so that
// tests drive the schedule without sleeping.
func withClock(c clock.Clock) Option { return func(m *Monitor) { m.clock = c } }

// NewMonitor returns a Monitor for cfg (its defaults filled in) that
// reports verdicts to onChange. onChange is called from the checks'
// goroutines, one call at a time per endpoint; it must not block for long,
// nor close the Monitor.
func NewMonitor(cfg ActiveConfig, onChange OnChangeFunc, opts ...Option) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m := &Monitor{cfg: cfg, onChange: onChange, clock: clock.Real, probes: map[string]*probe{}}
	for _, o := range opts {
		o(m)
	}
	if m.checker == nil {
		c, err := cfg.NewChecker()
		if err != nil {
			return nil, err
		}
		m.checker = c
		m.shared = true
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.kind = checkKind(m.checker)
	return m, nil
}

// Start begins checking the endpoints synced so far and any synced later.
// Checks stop when ctx is done or at Close.
func (m *Monitor) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx != nil || m.closed {
		return
	}
	m.ctx, m.cancel = context.WithCancel(ctx)
	for _, p := range m.probes {
		m.launchLocked(p)
	}
}

// Close stops every check and waits for their goroutines to end. A shared
// probe stream keeps running for its other subscribers.
func (m *Monitor) Close() {
	m.mu.Lock()
	m.closed = true
	if m.cancel != nil {
		m.cancel()
	}
	m.probes = map[string]*probe{}
	m.mu.Unlock()
	m.wg.Wait()
}

// Sync makes the checked set equal to endpoints: it starts checks for new
// endpoints and stops those of endpoints that left. An address whose
// Endpoint was replaced (its spec changed) is checked afresh.
func (m *Monitor) Sync(endpoints []*endpoint.Endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	keep := make(map[string]bool, len(endpoints))
	for _, ep := range endpoints {
		keep[ep.Address()] = true
		if p := m.probes[ep.Address()]; p != nil {
			if p.ep == ep {
				continue
			}
			m.stopLocked(p)
		}
		p := &probe{ep: ep}
		m.probes[ep.Address()] = p
		if m.ctx != nil {
			m.launchLocked(p)
		}
	}
	for addr, p := range m.probes {
		if !keep[addr] {
			m.stopLocked(p)
			delete(m.probes, addr)
		}
	}
}

// Nudge tells the Monitor that passive health saw addr fail: its adaptive
// interval snaps back to Interval, and a check already scheduled further
// out is brought forward. It never blocks, so passive health may call it on
// the request path.
func (m *Monitor) Nudge(addr string) {
	m.mu.Lock()
	p := m.probes[addr]
	m.mu.Unlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	s := p.stream
	p.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case s.nudge <- struct{}{}:
	default: // one pending nudge is enough
	}
}

func (m *Monitor) stopLocked(p *probe) {
	if p.cancel != nil {
		p.cancel()
	}
}

func (m *Monitor) launchLocked(p *probe) {
	ctx, cancel := context.WithCancel(m.ctx)
	p.cancel = cancel
	m.wg.Add(1)
	m.running.Add(1)
	go m.run(ctx, p)
}

// run subscribes p to its probe stream for as long as ctx lasts.
func (m *Monitor) run(ctx context.Context, p *probe) {
	defer m.wg.Done()
	defer m.running.Add(-1)
	healthy := p.ep.State() != endpoint.Unhealthy
	p.t = tracker{rise: m.cfg.Rise, fall: m.cfg.Fall, kind: m.kind, healthy: healthy}
	s := m.subscribe(p, healthy)
	<-ctx.Done()
	s.unsubscribe(p)
}

// deliver hands one check result to p: its own verdict, and the callbacks.
func (m *Monitor) deliver(p *probe, err error, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return
	}
	if changed, reason := p.t.observe(err); changed {
		m.report(p, reason, now)
	} else if err == nil && p.t.healthy && m.onPass != nil {
		m.onPass(p.ep, now)
	}
}

// report logs p's new verdict and hands it to onChange; p.mu is held.
func (m *Monitor) report(p *probe, reason string, now time.Time) {
	m.log.Info("active health verdict", "endpoint", p.ep.Address(), "healthy", p.t.healthy, "reason", reason)
	if m.onChange != nil {
		m.onChange(p.ep, p.t.healthy, reason, now)
	}
}
