package httpproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/ratelimit"
	rlredis "github.com/switchboard-dev/switchboard/ratelimit/redis"
)

// CodeRateLimited and CodeOverloaded are the error codes of requests
// refused by a rate limit (429) or by a route's bulkhead (503).
const (
	CodeRateLimited = "rate_limited"
	CodeOverloaded  = "overloaded"
)

// limiter is the running form of one entry of a route's rate_limit list.
type limiter struct {
	name   string
	cfg    config.RateLimit
	source ratelimit.KeySource
	local  *ratelimit.Keyed
	global *rlredis.Limiter
	client *goredis.Client // the global limiter's own; closed when retired

	allowed, delayed, rejected prometheus.Counter
}

// bulkhead is the running form of a route's concurrency block.
type bulkhead struct {
	cfg ratelimit.ConcurrencyConfig
	c   *ratelimit.Concurrency
}

// limitSet holds every route's limiters of one configuration, so that a
// reload can keep those whose settings did not change (with their state).
type limitSet struct {
	limiters  map[string]*limiter // by route name + "\x00" + limiter name
	bulkheads map[string]*bulkhead
}

func (ls *limitSet) close() {
	for _, l := range ls.limiters {
		l.close()
	}
}

func (l *limiter) close() {
	if l.client != nil {
		l.client.Close()
	}
}

// buildLimits makes the running limiters of route rc, reusing those of prev
// whose configuration is unchanged.
func (s *Server) buildLimits(rc *config.Route, prev, next *limitSet) ([]*limiter, *bulkhead, error) {
	var out []*limiter
	for i, lc := range rc.RateLimit {
		name := lc.Name
		if name == "" {
			name = fmt.Sprintf("rate_limit_%d", i)
		}
		id := rc.Name + "\x00" + name
		if p := prev.limiters[id]; p != nil && reflect.DeepEqual(p.cfg, lc) {
			next.limiters[id] = p
			out = append(out, p)
			continue
		}
		l := &limiter{name: name, cfg: lc}
		if lc.Global != nil {
			opt := &goredis.Options{
				Addr: lc.Global.Redis, Password: lc.Global.Password, DB: lc.Global.DB,
				// Every call is bounded by the limiter's timeout; a dead
				// Redis must not cost retries on top.
				ContextTimeoutEnabled: true, MaxRetries: -1,
			}
			l.client = goredis.NewClient(opt)
			route, lname := rc.Name, name
			g, err := rlredis.New(l.client, lc.Config, lc.Global.Config, rlredis.WithErrorHandler(func(err error) {
				s.limitMetrics.redisErrors.WithLabelValues(route, lname).Inc()
				s.log.Debug("global rate limit: redis call failed", "route", route, "limiter", lname, "error", err)
			}))
			if err != nil {
				l.client.Close()
				return nil, nil, fmt.Errorf("route %q rate_limit %q: %w", rc.Name, name, err)
			}
			l.global, l.source = g, g.Source()
		} else {
			k, err := ratelimit.NewKeyed(lc.Config)
			if err != nil {
				return nil, nil, fmt.Errorf("route %q rate_limit %q: %w", rc.Name, name, err)
			}
			l.local, l.source = k, k.Source()
		}
		m := s.limitMetrics.decisions
		l.allowed = m.WithLabelValues(rc.Name, name, "allowed")
		l.delayed = m.WithLabelValues(rc.Name, name, "delayed")
		l.rejected = m.WithLabelValues(rc.Name, name, "rejected")
		next.limiters[id] = l
		out = append(out, l)
	}
	var bh *bulkhead
	if rc.Concurrency != nil {
		if p := prev.bulkheads[rc.Name]; p != nil && p.cfg == *rc.Concurrency {
			bh = p
		} else {
			c, err := ratelimit.NewConcurrency(*rc.Concurrency)
			if err != nil {
				return nil, nil, fmt.Errorf("route %q concurrency: %w", rc.Name, err)
			}
			bh = &bulkhead{cfg: *rc.Concurrency, c: c}
		}
		next.bulkheads[rc.Name] = bh
	}
	return out, bh, nil
}

// limitMetrics are the rate limiters' metrics.
type limitMetrics struct {
	decisions   *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	bulkhead    *prometheus.CounterVec
}

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	m := &limitMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ratelimit_decisions_total",
			Help: "Rate limit decisions, by route, limiter and decision (allowed, delayed, rejected).",
		}, []string{"route", "limiter", "decision"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ratelimit_redis_errors_total",
			Help: "Failed or timed-out Redis calls of global rate limits, by route and limiter.",
		}, []string{"route", "limiter"}),
		bulkhead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_concurrency_rejections_total",
			Help: "Requests refused by a concurrency limit (bulkhead), by route and the limit's scope (route or upstream).",
		}, []string{"route", "scope"}),
	}
	reg.MustRegister(m.decisions, m.redisErrors, m.bulkhead)
	return m
}

// admit runs the route's rate limits for r. It returns false after writing
// the rejection; a leaky bucket's delay is waited out here. On admission
// the tightest limit's RateLimit-* headers go on the response.
func admit(w http.ResponseWriter, r *http.Request, rt *route, now time.Time) (bool, int) {
	var tightest ratelimit.Result
	have := false
	var delay time.Duration
	for _, l := range rt.limiters {
		key, _ := l.source.Key(r, rt.name) // no key: the shared "" bucket, so leaving a header out bypasses nothing
		var res ratelimit.Result
		if l.global != nil {
			res = l.global.AllowN(r.Context(), key, now, 1)
		} else {
			res = l.local.ReserveN(key, now, 1)
		}
		if !res.Allowed {
			l.rejected.Inc()
			res.SetHeaders(w.Header())
			WriteError(w, http.StatusTooManyRequests, CodeRateLimited, "rate limit "+l.name+" of route "+rt.name+" exceeded")
			return false, http.StatusTooManyRequests
		}
		if res.Delay > 0 {
			l.delayed.Inc()
			delay = max(delay, res.Delay)
		} else {
			l.allowed.Inc()
		}
		if !have || res.Remaining < tightest.Remaining {
			tightest, have = res, true
		}
	}
	if delay > 0 {
		if err := ratelimit.Sleep(r.Context(), delay); err != nil {
			return false, statusClientClosed
		}
	}
	if have {
		tightest.SetHeaders(w.Header())
	}
	return true, 0
}

// enter takes a slot of the route's bulkhead and then of its upstream's.
// It returns the release func, or nil after writing the rejection.
func enter(w http.ResponseWriter, r *http.Request, rt *route, log *slog.Logger) func() {
	ctx := r.Context()
	if rt.timeout > 0 {
		// Waiting in a queue counts against the route's timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.timeout)
		defer cancel()
	}
	releaseRoute := func() {}
	if rt.bulkhead != nil {
		rel, err := rt.bulkhead.c.Acquire(ctx)
		if err != nil {
			overloaded(w, rt.bulkheadRejected, "route "+rt.name, log, err)
			return nil
		}
		releaseRoute = rel
	}
	if b := rt.up.bulkhead; b != nil {
		rel, err := b.c.Acquire(ctx)
		if err != nil {
			releaseRoute()
			overloaded(w, rt.upBulkheadRejected, "upstream "+rt.up.name, log, err)
			return nil
		}
		return func() { rel(); releaseRoute() }
	}
	return releaseRoute
}

func overloaded(w http.ResponseWriter, counter prometheus.Counter, what string, log *slog.Logger, err error) {
	counter.Inc()
	w.Header().Set("Retry-After", "1")
	WriteError(w, http.StatusServiceUnavailable, CodeOverloaded, what+" is at its concurrency limit")
	log.Debug("bulkhead rejected a request", "at", what, "error", err)
}
