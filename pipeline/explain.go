package pipeline

import (
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/ratelimit"
	rlredis "github.com/switchboard-dev/switchboard/ratelimit/redis"
)

// Decision is what a route's protections would decide about one request
// at one instant, found without counting anything: no token is taken, no
// queue place or concurrency slot held, no breaker probe used. It answers
// "why was this refused?" (GET /api/v1/explain); a real request a moment
// later may be decided differently.
type Decision struct {
	// RateLimits are the route's rate limits, in the order they apply.
	RateLimits []LimitDecision `json:"rate_limits"`
	// Concurrency are the concurrency limits the request would pass: the
	// route's, then its upstream's.
	Concurrency []ConcurrencyDecision `json:"concurrency"`
	// Breaker is the route breaker's; nil without one.
	Breaker *BreakerDecision `json:"breaker,omitempty"`
	// Refused names the first protection that would refuse the request
	// ("rate limit per_client", "route breaker"...), "" when none would.
	Refused string `json:"refused,omitempty"`
}

// LimitDecision is one rate limit's answer.
type LimitDecision struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Rate      string `json:"rate"`
	// Key is where the limit takes its key from (client_ip,
	// header:X-Api-Key, path, route); KeyValue the key this request
	// yields. KeyFound is false when the request carries none: it then
	// shares the one bucket of keyless requests.
	Key      string `json:"key"`
	KeyValue string `json:"key_value"`
	KeyFound bool   `json:"key_found"`
	Global   bool   `json:"global,omitempty"`
	// Peeked is false for a global limit, which Redis decides: Allowed
	// and the counts are then unknown, and Note says so.
	Peeked    bool   `json:"peeked"`
	Allowed   bool   `json:"allowed"`
	Limit     int    `json:"limit"`
	Remaining int    `json:"remaining"`
	Delay     string `json:"delay,omitempty"`       // a leaky bucket's wait for its slot
	RetryIn   string `json:"retry_after,omitempty"` // when refused
	Note      string `json:"note,omitempty"`
}

// ConcurrencyDecision is one concurrency limit's occupation and what it
// would do with one more request: "admit", "queue" or "refuse".
type ConcurrencyDecision struct {
	Scope string `json:"scope"` // "route" or "upstream"
	ratelimit.ConcurrencyState
	Would string `json:"would"`
}

// BreakerDecision is the route breaker's state and answer.
type BreakerDecision struct {
	State   string `json:"state"`
	Allowed bool   `json:"allowed"`
	// HalfOpenIn is, while open, the time until probes are let through.
	HalfOpenIn string `json:"half_open_in,omitempty"`
}

// Explain says what the route's rate limits, concurrency limits and
// breaker would decide about req at now, changing nothing. req is read as
// admit reads it (its key: header, RemoteAddr, path).
func (r *Route) Explain(req *http.Request, now time.Time) Decision {
	d := Decision{RateLimits: []LimitDecision{}, Concurrency: []ConcurrencyDecision{}}
	refuse := func(what string) {
		if d.Refused == "" {
			d.Refused = what
		}
	}
	for _, l := range r.limiters {
		key, found := l.source.Key(req, r.name)
		ld := LimitDecision{Name: l.name, Algorithm: l.cfg.Algorithm, Rate: l.cfg.Rate,
			Key: l.source.String(), KeyValue: key, KeyFound: found}
		if ld.Algorithm == "" {
			ld.Algorithm = ratelimit.TokenBucketName
		}
		if !found {
			ld.Note = "the request has no key: it shares the bucket of keyless requests"
		}
		if l.global != nil {
			ld.Global = true
			ld.Note = "not peeked: global limits are decided in Redis, atomically with the request"
			if l.global.Degraded(now) {
				mode := l.cfg.Global.OnFailure
				if mode == "" {
					mode = rlredis.FailOpen
				}
				ld.Note += "; Redis is failing, so for now it is decided by " + mode
			}
			d.RateLimits = append(d.RateLimits, ld)
			continue
		}
		res := l.local.PeekN(key, now, 1)
		ld.Peeked, ld.Allowed, ld.Limit, ld.Remaining = true, res.Allowed, res.Limit, res.Remaining
		if res.Delay > 0 {
			ld.Delay = res.Delay.String()
		}
		if !res.Allowed {
			if res.RetryAfter == ratelimit.InfDuration {
				ld.RetryIn = "never"
			} else {
				ld.RetryIn = res.RetryAfter.String()
			}
			refuse("rate limit " + l.name)
		}
		d.RateLimits = append(d.RateLimits, ld)
	}
	for i, c := range [2]*ratelimit.Concurrency{r.limit, r.up.Concurrency()} {
		if c == nil {
			continue
		}
		cd := ConcurrencyDecision{Scope: "route", ConcurrencyState: c.Peek()}
		if i == 1 {
			cd.Scope = "upstream"
		}
		switch s := cd.ConcurrencyState; {
		case s.InFlight < s.MaxInFlight && s.Queued == 0:
			cd.Would = "admit"
		case s.Queued < s.Queue:
			cd.Would = "queue"
		default:
			cd.Would = "refuse"
			refuse(cd.Scope + " concurrency limit")
		}
		d.Concurrency = append(d.Concurrency, cd)
	}
	if r.brk != nil {
		st, ok, in := r.brk.Peek(now)
		bd := &BreakerDecision{State: st.String(), Allowed: ok}
		if in > 0 {
			bd.HalfOpenIn = in.Round(time.Millisecond).String()
		}
		if !ok {
			refuse("route breaker")
		}
		d.Breaker = bd
	}
	return d
}
