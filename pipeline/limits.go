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
		if l.global != nil {
			r.globalLimit = true // admitting asks Redis: a blocking step
		}
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

// admit starts c through the route's limits: the rate limits (Block's when
// one is global), then the concurrency limits.
func (c *Call) admit(now time.Time) Step {
	r := c.route
	if len(r.limiters) == 0 {
		return c.enter(now)
	}
	if r.globalLimit {
		return c.block(blockAdmit)
	}
	delay, err := r.rateLimit(c)
	return c.admitted(delay, err, now)
}

// rateLimit runs the rate limits for c and returns the delay a leaky bucket
// asks for (the largest of them), or the refusal. On admission the
// tightest limit is kept for the RateLimit-* headers. It blocks only for a
// global limit (a call to Redis).
func (r *Route) rateLimit(c *Call) (time.Duration, *Error) {
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
			return 0, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Limit: res,
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
	return delay, nil
}

// admitted goes on after the rate limits: the refusal, the leaky bucket's
// delay as a wait, or the concurrency limits.
func (c *Call) admitted(delay time.Duration, err *Error, now time.Time) Step {
	if err != nil {
		return c.fail(err)
	}
	if delay > 0 {
		c.next = resumeAdmit
		return c.wait(now.Add(delay))
	}
	return c.enter(now)
}

// enter takes a slot of the route's concurrency limit and then of its
// upstream's, each when one is free now; c holds them until Finish. When
// one is not, and its limit has a queue, waiting in it is Block's.
func (c *Call) enter(now time.Time) Step {
	r := c.route
	for i, l := range [2]*ratelimit.Concurrency{r.limit, r.up.Concurrency()} {
		if l == nil {
			continue
		}
		rel, ok := l.TryAcquire()
		if !ok {
			if l.Queue() > 0 {
				return c.block(blockEnter)
			}
			return c.fail(r.concurrencyLimited(i, ratelimit.ErrConcurrencyLimited))
		}
		c.release[i] = rel
	}
	return c.checkBreaker(now)
}

// enterQueued takes the concurrency slots c does not hold yet, waiting in
// their queues; the wait counts against the route's timeout.
func (c *Call) enterQueued() *Error {
	r := c.route
	ctx := c.Req.Context()
	if !c.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline)
		defer cancel()
	}
	for i, l := range [2]*ratelimit.Concurrency{r.limit, r.up.Concurrency()} {
		if l == nil || c.release[i] != nil {
			continue
		}
		rel, err := l.Acquire(ctx)
		if err != nil {
			return r.concurrencyLimited(i, err)
		}
		c.release[i] = rel
	}
	return nil
}

// concurrencyLimited is the error of a call refused by the route's
// concurrency limit (i 0) or its upstream's (i 1).
func (r *Route) concurrencyLimited(i int, err error) *Error {
	what := "route " + r.name
	if i == 1 {
		what = "upstream " + r.up.Name()
	}
	r.rejected[i].inc()
	r.log.Debug("concurrency limit rejected a request", "at", what, "error", err)
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeConcurrencyLimited, RetryAfter: time.Second,
		Msg: what + " is at its concurrency limit", Err: err}
}

// clientClosed is the error of a call whose caller went away.
func clientClosed(err error) *Error {
	return &Error{Status: StatusClientClosed, Code: CodeClientClosed, Msg: "the client went away", Err: err}
}
