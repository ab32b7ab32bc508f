package retry

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// Defaults for the zero fields of a Policy.
const (
	DefaultAttempts            = 3
	DefaultBackoffBase         = 25 * time.Millisecond
	DefaultBackoffMax          = 250 * time.Millisecond
	DefaultBudgetPercent       = 20
	DefaultBudgetWindow        = 10 * time.Second
	DefaultMinRetriesPerSecond = 10
	DefaultBodyLimit           = 64 << 10
)

// DefaultStatuses are the response statuses retried when Policy.Statuses is
// empty: the gateway errors, which say the upstream (not the request) failed.
var DefaultStatuses = []int{502, 503, 504}

// defaultRetryOn is shared, not rebuilt, so that WithDefaults (called on
// every backoff) does not allocate.
var defaultRetryOn = []string{"connect_failure", "reset", "timeout"}

// Condition is a bit set of transport failures worth retrying.
type Condition uint8

// The conditions of Policy.RetryOn.
const (
	// ConnectFailure: the connection could not be established, so the
	// upstream never saw the request.
	ConnectFailure Condition = 1 << iota
	// Reset: the connection was reset or closed before any byte of the
	// response arrived. After the first response byte a retry could
	// duplicate what the client already received, so the caller must not
	// classify such a failure as Reset.
	Reset
	// Timeout: the attempt ran out of its per-try timeout (or the transport
	// timed out).
	Timeout
)

// AllConditions is the default of Policy.RetryOn.
const AllConditions = ConnectFailure | Reset | Timeout

var conditionNames = []struct {
	c    Condition
	name string
}{{ConnectFailure, "connect_failure"}, {Reset, "reset"}, {Timeout, "timeout"}}

// ParseCondition parses one entry of retry_on: connect_failure, reset or
// timeout.
func ParseCondition(s string) (Condition, error) {
	for _, n := range conditionNames {
		if n.name == s {
			return n.c, nil
		}
	}
	return 0, fmt.Errorf("%q is not a retry condition (known: connect_failure, reset, timeout)", s)
}

func (c Condition) String() string {
	var parts []string
	for _, n := range conditionNames {
		if c&n.c != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Policy configures retries for one route. The yaml tags are the keys of a
// route's retry: block. A zero field takes its default.
type Policy struct {
	// Attempts is the total number of tries, the first included: 1 means
	// never retry. Default 3.
	Attempts int `yaml:"attempts"`
	// PerTryTimeout bounds each attempt, up to the response header. Default
	// 0: no per-try bound (the route deadline still bounds the whole
	// request, retries included).
	PerTryTimeout time.Duration `yaml:"per_try_timeout"`
	// BackoffBase is the backoff before the first retry, doubled for each
	// retry after it. Default 25ms.
	BackoffBase time.Duration `yaml:"backoff_base"`
	// BackoffMax caps the doubled backoff. Default 250ms.
	BackoffMax time.Duration `yaml:"backoff_max"`
	// RetryOn lists the transport failures worth retrying: connect_failure,
	// reset (before any response byte), timeout. Default all three.
	RetryOn []string `yaml:"retry_on"`
	// Statuses lists the response statuses worth retrying. Default 502,
	// 503, 504.
	Statuses []int `yaml:"statuses"`
	// RetryNonIdempotent lets the route retry POST, PATCH and other
	// non-idempotent methods without an Idempotency-Key: the route's owner
	// asserts that the upstream tolerates duplicates. Default false.
	RetryNonIdempotent bool `yaml:"retry_non_idempotent"`
	// BodyLimit is how many bytes of a request body are kept for replay. A
	// larger body is streamed to the first attempt and never retried.
	// Default 65536 (64 KiB).
	BodyLimit int `yaml:"body_limit"`

	// BudgetPercent is the share, in percent, of recent requests that may
	// be retried: 20 allows one retry per five requests over BudgetWindow.
	// Default 20.
	BudgetPercent float64 `yaml:"budget_percent"`
	// BudgetWindow is how far back the budget counts requests and retries.
	// Default 10s.
	BudgetWindow time.Duration `yaml:"budget_window"`
	// MinRetriesPerSecond is a floor under the budget so that a route with
	// little traffic can still retry: MinRetriesPerSecond × BudgetWindow
	// retries are allowed on top of the ratio. Default 10.
	MinRetriesPerSecond float64 `yaml:"min_retries_per_second"`

	// HedgeAfter turns on hedging for idempotent requests without a body:
	// when no response header has come this long after the first attempt,
	// a second one goes to another endpoint; the first response wins and
	// the other attempt is cancelled. A duration ("50ms"), or "p95" for the
	// route's recent 95th-percentile latency. Hedges are paid from the same
	// budget as retries. Default "": off.
	HedgeAfter string `yaml:"hedge_after"`
}

// Hedge returns the fixed hedge delay, whether the delay is the recent p95
// instead, and whether hedging is on at all.
func (p Policy) Hedge() (after time.Duration, p95, on bool) {
	switch p.HedgeAfter {
	case "":
		return 0, false, false
	case "p95":
		return 0, true, true
	}
	d, err := time.ParseDuration(p.HedgeAfter)
	return d, false, err == nil && d > 0
}

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	if p.Attempts == 0 {
		p.Attempts = DefaultAttempts
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = DefaultBackoffBase
	}
	if p.BackoffMax == 0 {
		p.BackoffMax = DefaultBackoffMax
	}
	if len(p.RetryOn) == 0 {
		p.RetryOn = defaultRetryOn
	}
	if len(p.Statuses) == 0 {
		p.Statuses = DefaultStatuses
	}
	if p.BodyLimit == 0 {
		p.BodyLimit = DefaultBodyLimit
	}
	if p.BudgetPercent == 0 {
		p.BudgetPercent = DefaultBudgetPercent
	}
	if p.BudgetWindow == 0 {
		p.BudgetWindow = DefaultBudgetWindow
	}
	if p.MinRetriesPerSecond == 0 {
		p.MinRetriesPerSecond = DefaultMinRetriesPerSecond
	}
	return p
}

// Validate reports every problem in p, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (p Policy) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	if p.Attempts < 0 {
		bad("attempts", "must be at least 1 (the first try counts), got %d", p.Attempts)
	}
	if h := p.HedgeAfter; h != "" && h != "p95" {
		if d, err := time.ParseDuration(h); err != nil || d <= 0 {
			bad("hedge_after", `must be a positive duration like "50ms" or "p95", got %q`, h)
		}
	}
	if p.PerTryTimeout < 0 {
		bad("per_try_timeout", "must not be negative, got %s", p.PerTryTimeout)
	}
	if p.BackoffBase < 0 {
		bad("backoff_base", "must not be negative, got %s", p.BackoffBase)
	}
	if p.BackoffMax < 0 {
		bad("backoff_max", "must not be negative, got %s", p.BackoffMax)
	}
	d := p.WithDefaults()
	if p.BackoffBase >= 0 && p.BackoffMax >= 0 && d.BackoffMax < d.BackoffBase {
		bad("backoff_max", "%s is below backoff_base %s", d.BackoffMax, d.BackoffBase)
	}
	for i, s := range p.RetryOn {
		if _, err := ParseCondition(s); err != nil {
			bad(fmt.Sprintf("retry_on[%d]", i), "%w", err)
		}
	}
	for i, s := range p.Statuses {
		if s < 100 || s > 599 {
			bad(fmt.Sprintf("statuses[%d]", i), "%d is not an HTTP status (100-599)", s)
		}
	}
	if p.BodyLimit < 0 {
		bad("body_limit", "must not be negative, got %d", p.BodyLimit)
	}
	if p.BudgetPercent < 0 || p.BudgetPercent > 100 {
		bad("budget_percent", "must be between 0 and 100 (20 = one retry per five requests), got %g", p.BudgetPercent)
	}
	if p.BudgetWindow < 0 {
		bad("budget_window", "must not be negative, got %s", p.BudgetWindow)
	} else if p.BudgetWindow > 0 && p.BudgetWindow < budgetSlots*time.Millisecond {
		bad("budget_window", "must be at least %s, got %s", budgetSlots*time.Millisecond, p.BudgetWindow)
	}
	if p.MinRetriesPerSecond < 0 {
		bad("min_retries_per_second", "must not be negative, got %g", p.MinRetriesPerSecond)
	}
	return errors.Join(errs...)
}

// Conditions returns the parsed RetryOn of a valid policy (AllConditions
// when it is empty). Unknown names are ignored: Validate reports them.
func (p Policy) Conditions() Condition {
	if len(p.RetryOn) == 0 {
		return AllConditions
	}
	var c Condition
	for _, s := range p.RetryOn {
		v, _ := ParseCondition(s)
		c |= v
	}
	return c
}

// RetryStatus reports whether a response with this status is worth
// retrying under p.
func (p Policy) RetryStatus(status int) bool {
	list := p.Statuses
	if len(list) == 0 {
		list = DefaultStatuses
	}
	for _, s := range list {
		if s == status {
			return true
		}
	}
	return false
}

// RetryError reports whether a transport error is worth retrying under p:
// Classify(err) is one of p's conditions. The caller must classify a
// failure after the first response byte itself (it is never retryable).
func (p Policy) RetryError(err error) bool {
	c := Classify(err)
	return c != 0 && p.Conditions()&c != 0
}

// Backoff returns the sleep before retry n (0 for the first retry) with
// full jitter: a uniform random duration in [0, min(max, base × 2^n)].
// Full jitter spreads the retries of many clients that failed at once, so
// they do not come back in a synchronized wave (see "Exponential Backoff
// And Jitter", AWS Architecture Blog, 2015). rnd returns a uniform value in
// [0, n); nil uses math/rand/v2.
func (p Policy) Backoff(n int, rnd func(n int64) int64) time.Duration {
	p = p.WithDefaults()
	ceil := p.BackoffCeiling(n)
	if ceil <= 0 {
		return 0
	}
	if rnd == nil {
		rnd = rand.Int64N
	}
	return time.Duration(rnd(int64(ceil) + 1))
}

// BackoffCeiling is the upper bound of Backoff(n): min(max, base × 2^n).
func (p Policy) BackoffCeiling(n int) time.Duration {
	p = p.WithDefaults()
	if n < 0 {
		n = 0
	}
	ceil := p.BackoffBase
	for i := 0; i < n && ceil < p.BackoffMax; i++ {
		ceil *= 2 // stops at BackoffMax, so no overflow
	}
	return min(ceil, p.BackoffMax)
}
