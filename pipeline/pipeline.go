package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Config is what protects a route and how its requests are retried. Every
// field is optional; the zero Config forwards each request once (plus the
// safe retries described in the package doc) with no limit and no timeout.
// The yaml tags are the keys of a route (docs/configuration.md).
type Config struct {
	// Timeout bounds the whole request, from Do to the end of the response
	// body, retries included. 0: none. (A route's timeout key, with its
	// default, is the configuration's own.)
	Timeout time.Duration `yaml:"-"`
	// RateLimit lists the limits a request must pass, in order, before it
	// is forwarded: per client and global limits may both apply. A
	// rejection is a 429 with Retry-After and RateLimit-* headers; a leaky
	// bucket delays instead. Keys: docs/ratelimit.md.
	RateLimit []RateLimit `yaml:"rate_limit"`
	// Concurrency caps the route's requests in flight, with an optional
	// bounded queue. A request over the cap gets 503 concurrency_limited.
	// Keys: ratelimit.ConcurrencyConfig.
	Concurrency *ratelimit.ConcurrencyConfig `yaml:"concurrency"`
	// Breaker is the route's circuit breaker: while it is open, requests go
	// straight to the fallback chain (or get 503) without touching the
	// upstream. Keys: docs/breaker.md.
	Breaker *breaker.Config `yaml:"breaker"`
	// Retry is the route's retry policy: attempts, per-try timeout,
	// backoff with full jitter, what is retried, the retry budget and
	// hedging. Without it only a connect failure, or a broken exchange of
	// an idempotent request without a body, is tried once more elsewhere.
	// Keys: docs/retry.md.
	Retry *retry.Policy `yaml:"retry"`
	// Fallback is the chain of steps tried when the route cannot answer
	// (breaker open, no healthy endpoint, retries exhausted, configured
	// statuses). Keys: docs/retry.md.
	Fallback *fallback.Config `yaml:"fallback"`
}

// Transport sends one attempt of a call to one endpoint. The HTTP proxy
// implements it over its HTTP/1.1 client (and net/http's h2c transport);
// the Go client over net/http.
//
// RoundTrip sends c.Req, with body as its body (nil for none; a retry gets
// a fresh reader of the same bytes), to ep and returns the response once
// its header is in. deadline, when not zero, bounds the whole exchange,
// the response body included; ctx ends it early. Errors should wrap what
// happened so that retry.Classify can tell a failed connect (nothing was
// sent) from a reset or a timeout; a failure to read the client's own
// body must wrap ErrRequestBody. It may be called concurrently (hedging).
type Transport interface {
	RoundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, c *Call, body io.Reader) (*http.Response, error)
}

// Backups finds the upstream and transport of a backup fallback step by
// the upstream's name.
type Backups func(name string) (*upstream.Upstream, Transport, bool)

// Option tunes New.
type Option func(*Route)

// WithMetrics counts the route's decisions in m (see NewMetrics).
func WithMetrics(m *Metrics) Option { return func(r *Route) { r.m = m } }

// WithLogger sets the logger for breaker transitions and failures. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(r *Route) { r.log = l } }

// WithBackups lets backup fallback steps send to other upstreams.
func WithBackups(b Backups) Option { return func(r *Route) { r.backups = b } }

// Replacing makes the new route take over prev's state wherever its
// settings are unchanged: an open breaker stays open, a spent retry budget
// stays spent, limiters keep their buckets, stale copies stay stored. prev
// may be nil.
func Replacing(prev *Route) Option { return func(r *Route) { r.prev = prev } }

// Sharing makes the new route share owner's protections: its rate
// limits, concurrency limit, breaker, retry policy and budget, and
// fallback chain (owner's settings must equal the new route's). For one
// route that sends to several upstreams, as a traffic split does: one
// pipeline per upstream, each picking from its own, under one set of
// limits. The upstreams' own concurrency limits stay theirs.
func Sharing(owner *Route) Option { return Replacing(owner) }

// Route is one route's pipeline over one upstream: rate limits, then the
// concurrency limit, then the breaker, then attempts over the upstream,
// then the fallback chain. It is safe for concurrent use.
type Route struct {
	name    string
	cfg     Config
	up      *upstream.Upstream
	t       Transport
	m       *Metrics
	log     *slog.Logger
	backups Backups
	prev    *Route

	closeOnce sync.Once
	limiters  []*limiter
	// globalLimit: a limiter is global, so admitting a call blocks.
	globalLimit bool
	limit       *ratelimit.Concurrency // nil: no concurrency limit
	rejected    [2]counter             // by the route's limit, by the upstream's
	brk         *breaker.Breaker       // nil: no breaker
	brkLog      *transitionLog         // brk's recent changes, shared as brk is
	fb          *fallback.Chain        // nil: no fallback
	// fbBlocks: the chain has a backup step, which sends a request.
	fbBlocks bool
	retry    *retry.Policy // nil: only the safe retries
	budget   *retry.Budget
	p95      *p95Tracker // recent latency, for hedge_after: p95; nil otherwise
	staleMax int64       // largest response body kept for stale
}

// New builds the pipeline of route name over up, sending through t. Its
// metrics carry the route's and the upstream's names.
func New(name string, cfg Config, up *upstream.Upstream, t Transport, opts ...Option) (*Route, error) {
	r := &Route{name: name, cfg: cfg, up: up, t: t, log: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	prev := r.prev
	r.prev = nil // not kept: a chain of replaced routes would never be freed
	r.rejected = r.m.concurrencySeries(name)
	if err := r.buildLimits(prev); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.buildBreaker(prev); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.buildFallback(prev); err != nil {
		r.Close()
		return nil, err
	}
	if p := cfg.Retry; p != nil {
		if err := p.Validate(); err != nil {
			r.Close()
			return nil, fmt.Errorf("retry: %w", err)
		}
		if prev != nil && prev.retry != nil && reflect.DeepEqual(prev.cfg.Retry, p) {
			r.retry, r.budget, r.p95 = prev.retry, prev.budget, prev.p95
		} else {
			pol := p.WithDefaults()
			r.retry, r.budget = &pol, retry.NewBudget(pol)
			if _, p95, on := pol.Hedge(); on && p95 {
				r.p95 = &p95Tracker{}
			}
		}
	}
	return r, nil
}

// Name is the route's name.
func (r *Route) Name() string { return r.name }

// Upstream is the upstream the route sends to.
func (r *Route) Upstream() *upstream.Upstream { return r.up }

// KeepsResponses reports whether the route keeps good answers for a
// stale fallback step: it reads their bodies as they are relayed, so a
// front end that relays bodies itself must leave such a route to Do.
func (r *Route) KeepsResponses() bool { return r.fb != nil && r.fb.Cache() != nil }

// Transport is the transport the route sends through (New's t): a front
// end that sends attempts itself (Begin) asks it how to reach the
// endpoints.
func (r *Route) Transport() Transport { return r.t }

// Close releases what the route holds alone (a global limit's Redis
// client, once no route uses it any more). Calls in progress may finish.
// Close is idempotent.
func (r *Route) Close() {
	r.closeOnce.Do(func() {
		for _, l := range r.limiters {
			l.release()
		}
	})
}

func (r *Route) buildBreaker(prev *Route) error {
	c := r.cfg.Breaker
	if c == nil {
		return nil
	}
	if prev != nil && prev.brk != nil && reflect.DeepEqual(prev.cfg.Breaker, c) {
		r.brk, r.brkLog = prev.brk, prev.brkLog
		return nil
	}
	b, err := breaker.New(*c)
	if err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	name, m, log, tl := r.name, r.m, r.log, &transitionLog{}
	m.breakerStarted(name)
	b.OnStateChange(func(from, to breaker.State, reason string, at time.Time) {
		m.breakerChanged(name, to)
		tl.add(BreakerTransition{From: from.String(), To: to.String(), Reason: reason, At: at})
		log.Warn("route breaker changed state", "route", name, "from", from.String(), "to", to.String(), "reason", reason)
	})
	r.brk, r.brkLog = b, tl
	return nil
}

// BreakerTransition is one state change of a route's breaker.
type BreakerTransition struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// keptTransitions is how many recent changes a route's breaker keeps.
const keptTransitions = 10

// transitionLog keeps a breaker's last keptTransitions changes.
type transitionLog struct {
	mu     sync.Mutex
	recent []BreakerTransition // oldest first
}

func (l *transitionLog) add(t BreakerTransition) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) == keptTransitions {
		l.recent = append(l.recent[:0], l.recent[1:]...)
	}
	l.recent = append(l.recent, t)
}

// Breaker reports the route breaker's state at now ("closed", "open",
// "half-open") and its last changes, newest last; ok is false when the
// route has no breaker. For dashboards and the admin API.
func (r *Route) Breaker(now time.Time) (state string, recent []BreakerTransition, ok bool) {
	if r.brk == nil {
		return "", nil, false
	}
	r.brkLog.mu.Lock()
	recent = append([]BreakerTransition(nil), r.brkLog.recent...)
	r.brkLog.mu.Unlock()
	return r.brk.State(now).String(), recent, true
}

func (r *Route) buildFallback(prev *Route) error {
	c := r.cfg.Fallback
	if c == nil {
		return nil
	}
	for _, s := range c.Steps {
		r.fbBlocks = r.fbBlocks || s.Type == fallback.StepBackup
	}
	r.staleMax = c.Cache.MaxResponseBytes
	if r.staleMax == 0 {
		r.staleMax = fallback.DefaultMaxResponseBytes
	}
	if prev != nil && prev.fb != nil && reflect.DeepEqual(prev.cfg.Fallback, c) {
		r.fb = prev.fb
		return nil
	}
	ch, err := fallback.New(*c, fallback.SenderFunc(r.sendBackup))
	if err != nil {
		return err
	}
	r.fb = ch
	return nil
}

// Call is one request going through a route. A front end keeps it in its
// own per-request state (so that a request costs one allocation), sets the
// exported fields, calls Route.Do (or drives the steps from Route.Begin)
// and, whatever the answer, Finish once the response is relayed.
type Call struct {
	// Req is the request as it goes upstream: method, URL, Host and the
	// header as the front end prepared it. Its context is the caller's:
	// when it ends, so does the call. Its own Body is not read: set Body.
	// It may be lent until Finish (an event loop parses the connection's
	// next request into the same memory after it): the pipeline keeps
	// none of its strings longer, and copies what it does keep (a stale
	// copy's key, a Redis key).
	Req *http.Request
	// Body is the request body, nil for none. Its length is
	// Req.ContentLength (-1: unknown). A BufferedBody is sent again as a
	// whole by every retry; any other body is kept for retries up to the
	// retry policy's body_limit.
	Body io.Reader
	// Upgrade is the protocol the request asks to switch to (WebSocket),
	// or "". Such a request is never hedged or sent twice.
	Upgrade string
	// HashKey, when HasHashKey is set, is the request's key for a hashing
	// policy (consistent_hash, maglev), taken in place of the one the
	// upstream's hash_key finds in the request. The Go client sets it from
	// the request's context.
	HashKey    string
	HasHashKey bool
	// Prefer, when set, is the endpoint the call should go to while it can
	// take traffic (a sticky session): the first attempt goes there, and
	// the policy picks for the rest (see upstream.Upstream.Pick).
	Prefer *endpoint.Endpoint
	// Front is the front end's own state of the call, handed to its
	// Transport untouched (the Go client keeps the first attempt's request
	// in it, so that a call costs one allocation).
	Front any

	route      *Route
	start      time.Time
	deadline   time.Time // of the whole call; zero for none
	info       balance.Info
	tried      []*endpoint.Endpoint
	att        attempt       // the attempt in progress
	attempts   int           // the attempts sent (Attempts)
	hedgeAfter time.Duration // of the attempt about to be hedged
	// err is the last attempt's error while its retry's backoff is
	// waited, nil while a status's retry is, or the error the call failed
	// with while the fallback chain runs.
	err error
	// held is a response whose status triggered the fallback chain while
	// the chain runs; relayed when no step answers.
	held *http.Response
	// The details of the step the call is at: a wait's end (WaitUntil),
	// the answer (Result).
	until   time.Time
	resp    *http.Response
	failure *Error
	rb      *retry.ReplayableBody
	limited ratelimit.Result // the tightest admitting rate limit
	release [2]func()        // concurrency slots held: route, upstream
	ticket  breaker.Ticket
	last    *endpoint.Endpoint // the endpoint tried last
	pick    balance.Result     // the endpoint whose response is being relayed
	status  int                // its response's status
	latency time.Duration      // to its response header
	load    string             // its load report
	stale   *staleRecorder
	next    next             // what Answered, Resume or Block goes on with
	trigger fallback.Trigger // what started the fallback chain
	// idempotent: the request may be sent again (retry.Retryable).
	idempotent bool
	hasLimit   bool
	degraded   bool
	finished   bool
	// callersFault is set when the call was refused for a mistake of the
	// caller's (no hash key): its outcome counts neither way for the route
	// breaker, not even as a half-open probe's success.
	callersFault bool
}

// BufferedBody is a request body the front end holds whole (in memory, or
// in a file), such as the HTTP proxy's buffer_requests makes. Set as
// Call.Body, every attempt reads it from its first byte through
// NewReader, so the call can be retried whatever the body's size, exactly
// as a call without a body can.
type BufferedBody interface {
	io.Reader
	// NewReader returns a reader of the whole body from its first byte.
	// Readers are independent and may be used concurrently.
	NewReader() io.Reader
}

// RateLimit returns the tightest rate limit that admitted the call, for
// the RateLimit-* response headers; ok is false when the route has none.
func (c *Call) RateLimit() (res ratelimit.Result, ok bool) { return c.limited, c.hasLimit }

// Endpoint is the endpoint tried last (the one that answered, if any), or
// nil when none was.
func (c *Call) Endpoint() *endpoint.Endpoint { return c.last }

// Degraded reports whether a fallback step answered in place of the
// upstream (the response carries fallback.HeaderDegraded).
func (c *Call) Degraded() bool { return c.degraded }

// Attempts is how many attempts the call has sent to its route's
// upstream, retries and a hedge included, a fallback's backup step not: 0
// for a call that never got to its upstream (refused by a limit or the
// breaker). Both HTTP engines' access logs report it.
func (c *Call) Attempts() int { return c.attempts }
