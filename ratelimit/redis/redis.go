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

// Config configures a global limit. The yaml tags are the keys of its
// block.
type Config struct {
	// Rate is the global refill rate, N/UNIT ("1000/s"). Required; at most
	// one event per microsecond, the resolution of the script's clock.
	Rate string `yaml:"rate"`
	// Burst is the global bucket's capacity. Required (at least 1).
	Burst int `yaml:"burst"`
	// Prefix is prepended to every key in Redis. Default
	// "switchboard:ratelimit:".
	Prefix string `yaml:"prefix"`
	// Timeout bounds each call to Redis. Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
	// OnFailure is fail_open or fail_closed: what a call does when Redis
	// fails or is slower than Timeout. Default fail_open.
	OnFailure string `yaml:"on_failure"`
	// LocalShare is the fraction (0, 1] of Rate and Burst that one process
	// admits on its own while Redis is failing, with fail_open: about 1/N
	// for N processes, so that together they stay near the global limit.
	// Required with fail_open.
	LocalShare float64 `yaml:"local_share"`
	// Recheck is how long the limiter decides without Redis after a
	// failure, before one request tries Redis again. Default 1s.
	Recheck time.Duration `yaml:"recheck"`
	// MaxKeys bounds the keys of the local fallback limiter (see
	// ratelimit.Keyed). Default 100000.
	MaxKeys int `yaml:"max_keys"`

	// Key says where the proxy finds a request's key, as in
	// ratelimit.Config: client_ip, header:NAME, path or route. Default
	// none: one global bucket, under the key the caller passes.
	Key string `yaml:"key"`
	// TrustedProxies are the proxies whose X-Forwarded-For is believed,
	// with key client_ip (see ratelimit.KeySource).
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (c Config) Validate() error {
	_, err := c.build()
	return err
}

type params struct {
	rate     ratelimit.Rate
	interval int64 // microseconds per token
	local    ratelimit.Config
	source   ratelimit.KeySource
}

func (c Config) build() (params, error) {
	var p params
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	rateOK := false
	if c.Rate == "" {
		bad("rate", "required, as N/UNIT like 100/s")
	} else if r, err := ratelimit.ParseRate(c.Rate); err != nil {
		errs = append(errs, err)
	} else if r.Interval() < time.Microsecond {
		bad("rate", "%s is more than one event per microsecond, the resolution of the Redis limiter", c.Rate)
	} else {
		p.rate, rateOK = r, true
		p.interval = int64((r.Interval() + time.Microsecond/2) / time.Microsecond)
	}
	if c.Burst < 1 {
		bad("burst", "must be at least 1, got %d", c.Burst)
	} else if rateOK && int64(c.Burst) > (1<<53)/p.interval {
		// The script's numbers are doubles: keep them exact.
		bad("burst", "%d at %s is too large for the Redis limiter", c.Burst, c.Rate)
	}
	if c.Timeout < 0 {
		bad("timeout", "must not be negative, got %v", c.Timeout)
	}
	if c.Recheck < 0 {
		bad("recheck", "must not be negative, got %v", c.Recheck)
	}
	if c.MaxKeys < 0 {
		bad("max_keys", "must be at least 1, got %d", c.MaxKeys)
	}
	p.source.Kind = ratelimit.KeyRoute
	if c.Key != "" {
		src, err := ratelimit.ParseKeySource(c.Key)
		if err != nil {
			errs = append(errs, err)
		}
		p.source = src
	}
	if len(c.TrustedProxies) > 0 {
		if p.source.Kind != ratelimit.KeyClientIP {
			bad("trusted_proxies", "needs key client_ip")
		}
		prefixes, err := ratelimit.ParseTrustedProxies(c.TrustedProxies)
		if err != nil {
			errs = append(errs, err)
		}
		p.source.TrustedProxies = prefixes
	}
	switch c.OnFailure {
	case "", FailOpen:
		switch {
		case c.LocalShare == 0:
			bad("local_share", "required with on_failure fail_open: the share of the global limit one process admits while Redis fails, e.g. 0.34 for three processes")
		case !(c.LocalShare > 0 && c.LocalShare <= 1):
			bad("local_share", "must be more than 0 and at most 1, got %v", c.LocalShare)
		case rateOK && c.Burst >= 1:
			// The local bucket: LocalShare of the rate (a longer
			// interval) and of the burst, at least 1.
			local := ratelimit.Rate{N: 1, Per: time.Duration(math.Round(float64(p.rate.Interval()) / c.LocalShare))}
			p.local = ratelimit.Config{
				Rate:    local.String(),
				Burst:   max(1, int(float64(c.Burst)*c.LocalShare)),
				Key:     ratelimit.KeyRoute,
				MaxKeys: c.MaxKeys,
			}
		}
	case FailClosed:
		if c.LocalShare != 0 {
			bad("local_share", "only used with on_failure fail_open")
		}
	default:
		bad("on_failure", "%q is unknown (known: fail_open, fail_closed)", c.OnFailure)
	}
	return p, errors.Join(errs...)
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

	downUntil atomic.Int64 // 0: Redis is healthy; else skip it until this (mono nanos)
	failures  atomic.Uint64
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithErrorHandler calls f with every Redis failure (a timeout, a refused
// connection, a script error), on the goroutine of the request that met
// it: f must be quick. Use it to count a metric or log; the limiter has
// already fallen back.
func WithErrorHandler(f func(error)) Option { return func(l *Limiter) { l.onError = f } }

// New returns a Limiter using client, after validating cfg. The client
// must have ContextTimeoutEnabled set (see the package doc).
func New(client goredis.Scripter, cfg Config, opts ...Option) (*Limiter, error) {
	p, err := cfg.build()
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
		capacity: int64(cfg.Burst) * p.interval,
		burst:    cfg.Burst,
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

// Source returns where the proxy should take the keys from (Config.Key;
// route when unset).
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
	t := mono(now)
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
		retry = max(time.Duration(d-mono(now)), time.Millisecond)
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
	return d != 0 && mono(now) < d
}

// epoch makes mono use the monotonic clock for times from time.Now.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }
