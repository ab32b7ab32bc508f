package pipeline

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/ratelimit"
	rlredis "github.com/switchboard-dev/switchboard/ratelimit/redis"
)

// RateLimit is one limit on a route: a name, the limit itself (the keys of
// ratelimit.Config, written in the entry: algorithm, rate, burst, queue,
// max_wait, variant, key, trusted_proxies, max_keys) and, to share it among
// every switchboard, global. docs/ratelimit.md describes the algorithms and
// which keys each reads; a key the algorithm does not read is an error.
type RateLimit struct {
	// Name identifies the limiter in metrics. Default "rate_limit_<index>".
	Name string `yaml:"name"`
	// Config is the limit. With global it must be a token bucket (see
	// ratelimit/redis.ValidateLimit).
	ratelimit.Config `yaml:",inline"`
	// Global shares the limit among every switchboard through Redis.
	Global *GlobalLimit `yaml:"global"`
}

// GlobalLimit makes a rate limit global: a token bucket kept in Redis
// (GCRA in a Lua script on the server's clock). Its keys are the Redis
// server to use and those of ratelimit/redis.Config: prefix, timeout,
// on_failure, local_share and recheck.
type GlobalLimit struct {
	// Redis is the server's host:port. Required.
	Redis string `yaml:"redis"`
	// Password and DB select the Redis database.
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`
	// Config is how the limit uses Redis.
	rlredis.Config `yaml:",inline"`
}

// limiter is the running form of one RateLimit.
type limiter struct {
	name   string
	cfg    RateLimit
	source ratelimit.KeySource
	local  *ratelimit.Keyed
	global *rlredis.Limiter
	client *goredis.Client // the global limit's own
	users  *atomic.Int32   // routes holding client; the last one closes it

	allowed, delayed, rejected counter
}

// release lets go of l; the last route to hold a global limit closes its
// Redis client.
func (l *limiter) release() {
	if l.users != nil && l.users.Add(-1) == 0 {
		l.client.Close()
	}
}

// buildLimits makes the route's limiters and concurrency limit, taking
// over those of prev whose settings are unchanged (with their state).
func (r *Route) buildLimits(prev *Route) error {
	for i, rl := range r.cfg.RateLimit {
		if rl.Name == "" {
			rl.Name = fmt.Sprintf("rate_limit_%d", i)
		}
		l, err := r.buildLimiter(rl, prev)
		if err != nil {
			return fmt.Errorf("rate limit %q: %w", rl.Name, err)
		}
		r.limiters = append(r.limiters, l)
	}
	if c := r.cfg.Concurrency; c != nil {
		if prev != nil && prev.limit != nil && *prev.cfg.Concurrency == *c {
			r.limit = prev.limit
		} else {
			l, err := ratelimit.NewConcurrency(*c)
			if err != nil {
				return fmt.Errorf("concurrency: %w", err)
			}
			r.limit = l
		}
	}
	return nil
}

func (r *Route) buildLimiter(rl RateLimit, prev *Route) (*limiter, error) {
	if prev != nil {
		for _, p := range prev.limiters {
			if p.name == rl.Name && reflect.DeepEqual(p.cfg, rl) {
				if p.users != nil && p.users.Add(1) == 1 {
					p.users.Add(-1) // prev was closed: its Redis client is gone
					break
				}
				l := *p
				return &l, nil
			}
		}
	}
	l := &limiter{name: rl.Name, cfg: rl}
	if g := rl.Global; g != nil {
		l.client = goredis.NewClient(&goredis.Options{
			Addr: g.Redis, Password: g.Password, DB: g.DB,
			// Every call is bounded by the limiter's timeout; a dead Redis
			// must not cost retries on top.
			ContextTimeoutEnabled: true, MaxRetries: -1,
		})
		route, name, m, log := r.name, rl.Name, r.m, r.log
		gl, err := rlredis.New(l.client, rl.Config, g.Config, rlredis.WithErrorHandler(func(err error) {
			m.redisError(route, name)
			log.Debug("global rate limit: redis call failed", "route", route, "limiter", name, "error", err)
		}))
		if err != nil {
			l.client.Close()
			return nil, err
		}
		l.global, l.source = gl, gl.Source()
		l.users = new(atomic.Int32)
		l.users.Store(1)
	} else {
		k, err := ratelimit.NewKeyed(rl.Config)
		if err != nil {
			return nil, err
		}
		l.local, l.source = k, k.Source()
	}
	l.allowed, l.delayed, l.rejected = r.m.limiterSeries(r.name, rl.Name)
	return l, nil
}

// admit runs the rate limits for c. A leaky bucket's delay is waited out
// here. On admission the tightest limit is kept for the RateLimit-*
// headers.
func (r *Route) admit(c *Call) error {
	req := c.Req
	var delay time.Duration
	for _, l := range r.limiters {
		key, _ := l.source.Key(req, r.name) // no key: the shared "" bucket, so leaving a header out bypasses nothing
		var res ratelimit.Result
		if l.global != nil {
			res = l.global.AllowN(req.Context(), key, c.start, 1)
		} else {
			res = l.local.ReserveN(key, c.start, 1)
		}
		if !res.Allowed {
			l.rejected.inc()
			return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Limit: res,
				Msg: "rate limit " + l.name + " of route " + r.name + " exceeded"}
		}
		if res.Delay > 0 {
			l.delayed.inc()
			delay = max(delay, res.Delay)
		} else {
			l.allowed.inc()
		}
		if !c.hasLimit || res.Remaining < c.limited.Remaining {
			c.limited, c.hasLimit = res, true
		}
	}
	if delay > 0 {
		if err := ratelimit.Sleep(req.Context(), delay); err != nil {
			return clientClosed(err)
		}
	}
	return nil
}

// enter takes a slot of the route's concurrency limit and then of its
// upstream's; c holds them until Finish.
func (r *Route) enter(c *Call) error {
	ul := r.up.Concurrency()
	if r.limit == nil && ul == nil {
		return nil
	}
	ctx := c.Req.Context()
	if !c.deadline.IsZero() {
		// Waiting in a queue counts against the route's timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline)
		defer cancel()
	}
	for i, l := range [2]*ratelimit.Concurrency{r.limit, ul} {
		if l == nil {
			continue
		}
		rel, err := l.Acquire(ctx)
		if err != nil {
			what := "route " + r.name
			if i == 1 {
				what = "upstream " + r.up.Name()
			}
			r.rejected[i].inc()
			r.log.Debug("concurrency limit rejected a request", "at", what, "error", err)
			return &Error{Status: http.StatusServiceUnavailable, Code: CodeConcurrencyLimited, RetryAfter: time.Second,
				Msg: what + " is at its concurrency limit", Err: err}
		}
		c.release[i] = rel
	}
	return nil
}

// clientClosed is the error of a call whose caller went away.
func clientClosed(err error) *Error {
	return &Error{Status: StatusClientClosed, Code: CodeClientClosed, Msg: "the client went away", Err: err}
}
