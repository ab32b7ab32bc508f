package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/ratelimit"
)

// The failure modes of Config.OnFailure.
const (
	FailOpen   = "fail_open"   // decide locally at LocalShare of the global limit
	FailClosed = "fail_closed" // reject
)

// Defaults for the Config fields. A zero field means the default.
const (
	DefaultTimeout = 50 * time.Millisecond
	DefaultRecheck = time.Second
	DefaultPrefix  = "switchboard:ratelimit:"
)

// Config is the Redis side of a global limit: the keys Redis is asked
// under, how long to wait for it and what to do when it fails. The limit
// itself (rate, burst and key) is a ratelimit.Config; New takes both. The
// yaml tags are keys of a rate-limit entry's global block; every zero
// field takes its default.
type Config struct {
	// Prefix is prepended to every key in Redis. Default
	// "switchboard:ratelimit:".
	Prefix string `yaml:"prefix"`
	// Timeout bounds each call to Redis: no request waits longer. Default
	// 50ms.
	Timeout time.Duration `yaml:"timeout"`
	// OnFailure is fail_open or fail_closed: what a call does when Redis
	// fails or is slower than Timeout. Default fail_open: decide locally
	// at LocalShare of the limit; fail_closed rejects.
	OnFailure string `yaml:"on_failure"`
	// LocalShare is the fraction (0, 1] of the rate and burst that one
	// process admits on its own while Redis is failing, with fail_open:
	// about 1/N for N processes, so that together they stay near the
	// global limit. Required with fail_open.
	LocalShare float64 `yaml:"local_share"`
	// Recheck is how long the limiter decides without Redis after a
	// failure, before one request tries Redis again. Default 1s.
	Recheck time.Duration `yaml:"recheck"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	if c.Timeout < 0 {
		bad("timeout", "must not be negative, got %v", c.Timeout)
	}
	if c.Recheck < 0 {
		bad("recheck", "must not be negative, got %v", c.Recheck)
	}
	switch c.OnFailure {
	case "", FailOpen:
		switch {
		case c.LocalShare == 0:
			bad("local_share", "required with on_failure fail_open: the share of the global limit one process admits while Redis fails, e.g. 0.34 for three processes")
		case !(c.LocalShare > 0 && c.LocalShare <= 1):
			bad("local_share", "must be more than 0 and at most 1, got %v", c.LocalShare)
		}
	case FailClosed:
		if c.LocalShare != 0 {
			bad("local_share", "only used with on_failure fail_open")
		}
	default:
		bad("on_failure", "%q is unknown (known: fail_open, fail_closed)", c.OnFailure)
	}
	return errors.Join(errs...)
}

// ValidateLimit reports what keeps limit from being a global limit, or nil:
// it must be a valid token bucket (ratelimit.Config.Validate: rate, burst,
// and optionally key, trusted_proxies and max_keys) whose rate and burst
// the script represents exactly. The errors are *field.Error values at the
// limit's keys.
func ValidateLimit(limit ratelimit.Config) error {
	if a := limit.Algorithm; a != "" && a != ratelimit.TokenBucketName {
		return field.Errorf("algorithm", "a global limit is a token bucket; %q cannot be global", a)
	}
	if err := limit.Validate(); err != nil {
		return err
	}
	r, _ := ratelimit.ParseRate(limit.Rate) // valid: Validate parsed it
	if r.Interval() < time.Microsecond {
		return field.Errorf("rate", "%s is more than one event per microsecond, the resolution of the Redis limiter", limit.Rate)
	}
	// The script's numbers are doubles: keep them exact.
	if int64(limit.Burst) > (1<<53)/micros(r.Interval()) {
		return field.Errorf("burst", "%d at %s is too large for the Redis limiter", limit.Burst, limit.Rate)
	}
	return nil
}

// micros rounds d to whole microseconds, the script's unit.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond/2) / time.Microsecond)
}

type params struct {
	rate     ratelimit.Rate
	interval int64 // microseconds per token
	local    ratelimit.Config
	source   ratelimit.KeySource
}

// build validates limit and c and works out what a Limiter needs.
func build(limit ratelimit.Config, c Config) (params, error) {
	if err := errors.Join(ValidateLimit(limit), c.Validate()); err != nil {
		return params{}, err
	}
	var p params
	p.rate, _ = ratelimit.ParseRate(limit.Rate)
	p.interval = micros(p.rate.Interval())
	p.source.Kind = ratelimit.KeyRoute
	if limit.Key != "" {
		p.source, _ = ratelimit.ParseKeySource(limit.Key)
	}
	if len(limit.TrustedProxies) > 0 {
		p.source.TrustedProxies, _ = ratelimit.ParseTrustedProxies(limit.TrustedProxies)
	}
	if c.OnFailure != FailClosed {
		// The local bucket: LocalShare of the rate (a longer interval) and
		// of the burst, at least 1.
		local := ratelimit.Rate{N: 1, Per: time.Duration(math.Round(float64(p.rate.Interval()) / c.LocalShare))}
		p.local = ratelimit.Config{
			Rate:    local.String(),
			Burst:   max(1, int(float64(limit.Burst)*c.LocalShare)),
			Key:     ratelimit.KeyRoute,
			MaxKeys: limit.MaxKeys,
		}
	}
	return p, nil
}

//go:embed gcra.lua
var gcraSource string

var gcraScript = goredis.NewScript(gcraSource)

// Limiter is a token bucket per key shared through Redis. Its methods are
// safe for concurrent use.
type Limiter struct {
	client   goredis.Scripter
	prefix   string
	interval int64 // microseconds per token
	capacity int64 // burst*interval
	burst    int
	timeout  time.Duration
	recheck  time.Duration
	local    *ratelimit.Keyed // nil: fail_closed
	onError  func(error)
	source   ratelimit.KeySource

	downUntil atomic.Int64 // 0: Redis is healthy; else skip it until this (clock.Nanos)
	failures  atomic.Uint64
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithErrorHandler calls f with every Redis failure (a timeout, a refused
// connection, a script error), on the goroutine of the request that met
// it: f must be quick. Use it to count a metric or log; the limiter has
// already fallen back.
func WithErrorHandler(f func(error)) Option { return func(l *Limiter) { l.onError = f } }

// New returns a Limiter of limit, a token bucket (see ValidateLimit),
// kept in Redis through client as cfg says, after validating both. The
// client must have ContextTimeoutEnabled set (see the package doc).
func New(client goredis.Scripter, limit ratelimit.Config, cfg Config, opts ...Option) (*Limiter, error) {
	p, err := build(limit, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	l := &Limiter{
		client:   client,
		prefix:   cfg.Prefix,
		interval: p.interval,
		capacity: int64(limit.Burst) * p.interval,
		burst:    limit.Burst,
		timeout:  cfg.Timeout,
		recheck:  cfg.Recheck,
		source:   p.source,
	}
	if l.prefix == "" {
		l.prefix = DefaultPrefix
	}
	if l.timeout == 0 {
		l.timeout = DefaultTimeout
	}
	if l.recheck == 0 {
		l.recheck = DefaultRecheck
	}
	if cfg.OnFailure != FailClosed {
		if l.local, err = ratelimit.NewKeyed(p.local); err != nil {
			return nil, fmt.Errorf("redis: local fallback limiter: %w", err)
		}
	}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

func checkClient(c goredis.Scripter) error {
	enabled := true
	switch c := c.(type) {
	case *goredis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	}
	if !enabled {
		return errors.New("redis: the client needs ContextTimeoutEnabled: true, or go-redis ignores the per-call timeout on socket reads and a request could wait on Redis for seconds")
	}
	return nil
}

// Source returns where the proxy should take the keys from (the limit's
// Key; route when unset).
func (l *Limiter) Source() ratelimit.KeySource { return l.source }

// Allow is AllowN(ctx, key, time.Now(), 1).Allowed.
func (l *Limiter) Allow(ctx context.Context, key string) bool {
	return l.AllowN(ctx, key, time.Now(), 1).Allowed
}

// AllowN takes n tokens from key's global bucket if it holds them. The
// decision is Redis's, on Redis's clock; now is used only when Redis is
// failing, by the local fallback and to time the next recheck. AllowN
// returns within Timeout even when Redis hangs. A canceled ctx is not a
// Redis failure: the call falls back without counting one.
//
// When a call times out, the script may still run on a slow server later
// and take its tokens: under a slow Redis the global limit errs towards
// rejecting.
func (l *Limiter) AllowN(ctx context.Context, key string, now time.Time, n int) ratelimit.Result {
	if n < 0 {
		panic("ratelimit/redis: negative n")
	}
	t := clock.Nanos(now)
	if d := l.downUntil.Load(); d != 0 {
		// Redis failed recently: decide locally, except for the one
		// request that wins the right to probe it after Recheck.
		if t < d || !l.downUntil.CompareAndSwap(d, t+int64(l.recheck)) {
			return l.fallback(key, now, n)
		}
	}
	res, err := l.eval(ctx, key, n)
	switch {
	case err == nil:
		if l.downUntil.Load() != 0 {
			l.downUntil.Store(0)
		}
		return res
	case ctx.Err() != nil:
		return l.fallback(key, now, n)
	}
	l.downUntil.Store(t + int64(l.recheck))
	l.failures.Add(1)
	if l.onError != nil {
		l.onError(err)
	}
	return l.fallback(key, now, n)
}

func (l *Limiter) eval(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	vals, err := gcraScript.Run(ctx, l.client, []string{l.prefix + key}, l.interval, l.capacity, n).Int64Slice()
	if err != nil {
		return ratelimit.Result{}, fmt.Errorf("ratelimit/redis: key %q: %w", key, err)
	}
	if len(vals) != 4 {
		return ratelimit.Result{}, fmt.Errorf("ratelimit/redis: key %q: script returned %d values, want 4", key, len(vals))
	}
	return ratelimit.Result{
		Allowed:    vals[0] == 1,
		Limit:      l.burst,
		Remaining:  int(vals[1]),
		ResetAfter: time.Duration(vals[2]) * time.Microsecond,
		RetryAfter: time.Duration(vals[3]) * time.Microsecond,
	}, nil
}

// fallback decides without Redis: locally with fail_open, a rejection
// with fail_closed (retry once Redis is asked again).
func (l *Limiter) fallback(key string, now time.Time, n int) ratelimit.Result {
	if l.local != nil {
		return l.local.AllowN(key, now, n)
	}
	retry := l.recheck
	if d := l.downUntil.Load(); d != 0 {
		retry = max(time.Duration(d-clock.Nanos(now)), time.Millisecond)
	}
	return ratelimit.Result{Limit: l.burst, ResetAfter: retry, RetryAfter: retry}
}

// Failures returns the number of calls that Redis failed (timeouts
// included) since the limiter was created.
func (l *Limiter) Failures() uint64 { return l.failures.Load() }

// Degraded reports whether the limiter is deciding without Redis at now,
// after a recent failure.
func (l *Limiter) Degraded(now time.Time) bool {
	d := l.downUntil.Load()
	return d != 0 && clock.Nanos(now) < d
}
