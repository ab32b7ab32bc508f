package breaker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// The window types of Config.WindowType.
const (
	WindowCount = "count" // the last WindowSize calls
	WindowTime  = "time"  // the calls of the last Window, in Buckets buckets
)

// Defaults of Config, applied to zero fields.
const (
	DefaultWindowSize     = 100
	DefaultWindow         = time.Minute
	DefaultBuckets        = 10
	DefaultMinRequests    = 20
	DefaultFailureRate    = 0.5
	DefaultSlowRate       = 1.0
	DefaultOpenFor        = 30 * time.Second
	DefaultMaxOpenFor     = 5 * time.Minute
	DefaultHalfOpenProbes = 3
)

// DefaultFailureStatuses is the status set counted as failures when
// Config.FailureStatuses is empty.
var DefaultFailureStatuses = []string{"500-599"}

// Config configures a Breaker. The yaml tags are the keys of a breaker
// block; every zero field takes its default.
type Config struct {
	// WindowType is "count" (default: the last WindowSize calls) or "time"
	// (the calls of the last Window).
	WindowType string `yaml:"window_type"`
	// WindowSize is how many of the most recent calls a count window holds.
	// Default 100.
	WindowSize int `yaml:"window_size"`
	// Window is how far back a time window looks. Default 1m.
	Window time.Duration `yaml:"window"`
	// Buckets is how many slices a time window is cut into; the oldest
	// slice drops out whole, so more buckets slide more smoothly.
	// Default 10.
	Buckets int `yaml:"buckets"`
	// MinRequests is how many calls the window must hold before the
	// failure and slow-call rates can open the breaker. Default 20.
	MinRequests int `yaml:"min_requests"`
	// FailureRate is the share of failed calls in the window (0-1) at or
	// above which the breaker opens. Default 0.5, or off when FailureCount
	// is set.
	FailureRate float64 `yaml:"failure_rate"`
	// FailureCount opens the breaker when the window holds that many
	// failures, however many calls succeeded alongside them: with a time
	// window, "5 failures within 60s" (window_type time, window 60s); with
	// a count window, 5 failures among the last window_size calls.
	// MinRequests does not apply to it. Setting it turns the failure-rate
	// rule off unless FailureRate is set too. Default 0: off.
	FailureCount int `yaml:"failure_count"`
	// SlowThreshold is the latency at or above which a call is slow.
	// Default 0: slow calls are not tracked.
	SlowThreshold time.Duration `yaml:"slow_threshold"`
	// SlowRate is the share of slow calls in the window (0-1) at or above
	// which the breaker opens. Default 1 (every call slow). Only with
	// SlowThreshold.
	SlowRate float64 `yaml:"slow_rate"`
	// ConsecutiveFailures opens the breaker after that many failures in a
	// row, whatever the window holds. Default 0: off.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// OpenFor is how long the breaker stays open before it lets probes
	// through. Default 30s.
	OpenFor time.Duration `yaml:"open_for"`
	// MaxOpenFor caps the open period, which doubles each time the probes
	// fail. Default 5m (at least OpenFor).
	MaxOpenFor time.Duration `yaml:"max_open_for"`
	// HalfOpenProbes is how many trial calls the half-open breaker admits;
	// all must succeed to close it. Default 3.
	HalfOpenProbes int `yaml:"half_open_probes"`
	// FailureStatuses are the HTTP statuses that count as failures, each
	// a code ("429") or an inclusive range ("500-599"). Default 500-599.
	FailureStatuses []string `yaml:"failure_statuses"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (c Config) Validate() error {
	_, err := c.build()
	return err
}

// settings is a validated Config with its defaults applied.
type settings struct {
	Config
	statuses statusSet
	// rates is whether a rate rule is on (failure_rate, or slow_rate with
	// slow_threshold): only they need the number of calls in the window,
	// so without them a time window records failures and nothing else.
	rates bool
}

// statusSet is a bitmap of the statuses 0-639, so that classifying an
// outcome is a shift and a mask.
type statusSet [10]uint64

func (s *statusSet) add(lo, hi int) {
	for c := lo; c <= hi; c++ {
		s[c/64] |= 1 << (c % 64)
	}
}

func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code/64]&(1<<(code%64)) != 0
}

func (c Config) build() (settings, error) {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	switch c.WindowType {
	case "":
		c.WindowType = WindowCount
	case WindowCount, WindowTime:
	default:
		bad("window_type", "must be %q or %q, got %q", WindowCount, WindowTime, c.WindowType)
	}
	if c.WindowSize < 0 {
		bad("window_size", "must not be negative, got %d", c.WindowSize)
	} else if c.WindowSize == 0 {
		c.WindowSize = DefaultWindowSize
	}
	if c.Window < 0 {
		bad("window", "must not be negative, got %v", c.Window)
	} else if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Buckets < 0 {
		bad("buckets", "must not be negative, got %d", c.Buckets)
	} else if c.Buckets == 0 {
		c.Buckets = DefaultBuckets
	}
	if c.WindowType == WindowTime && c.Window > 0 && c.Buckets > 0 && c.Window/time.Duration(c.Buckets) < time.Millisecond {
		bad("buckets", "window %v cut into %d buckets leaves less than 1ms each", c.Window, c.Buckets)
	}
	if c.MinRequests < 0 {
		bad("min_requests", "must not be negative, got %d", c.MinRequests)
	} else if c.MinRequests == 0 {
		c.MinRequests = DefaultMinRequests
	}
	if c.FailureCount < 0 {
		bad("failure_count", "must not be negative, got %d", c.FailureCount)
	} else if c.WindowType == WindowCount && c.WindowSize > 0 && c.FailureCount > c.WindowSize {
		bad("failure_count", "%d is more than window_size %d: the window never holds that many failures", c.FailureCount, c.WindowSize)
	}
	rate := func(key string, v *float64, def float64) {
		switch {
		case *v < 0 || *v > 1 || *v != *v:
			bad(key, "must be between 0 and 1, got %g", *v)
		case *v == 0:
			*v = def
		}
	}
	// failure_count is a mode of its own, as in the breakers that count
	// failures over a period: the failure-rate rule (with its
	// min_requests) stays off unless failure_rate is set as well.
	failureRateDefault := DefaultFailureRate
	if c.FailureCount > 0 {
		failureRateDefault = 0
	}
	rate("failure_rate", &c.FailureRate, failureRateDefault)
	rate("slow_rate", &c.SlowRate, DefaultSlowRate)
	if c.SlowThreshold < 0 {
		bad("slow_threshold", "must not be negative, got %v", c.SlowThreshold)
	}
	if c.WindowType == WindowCount && c.WindowSize > 0 && c.MinRequests > c.WindowSize && (c.FailureRate > 0 || c.SlowThreshold > 0) {
		what := "failure rate"
		if c.FailureRate == 0 {
			what = "slow-call rate"
		}
		bad("min_requests", "%d is more than window_size %d: the %s could never open the breaker", c.MinRequests, c.WindowSize, what)
	}
	if c.ConsecutiveFailures < 0 {
		bad("consecutive_failures", "must not be negative, got %d", c.ConsecutiveFailures)
	}
	if c.OpenFor < 0 {
		bad("open_for", "must not be negative, got %v", c.OpenFor)
	} else if c.OpenFor == 0 {
		c.OpenFor = DefaultOpenFor
	}
	if c.MaxOpenFor < 0 {
		bad("max_open_for", "must not be negative, got %v", c.MaxOpenFor)
	} else if c.MaxOpenFor == 0 {
		c.MaxOpenFor = max(DefaultMaxOpenFor, c.OpenFor)
	} else if c.OpenFor > 0 && c.MaxOpenFor < c.OpenFor {
		bad("max_open_for", "%v is less than open_for %v", c.MaxOpenFor, c.OpenFor)
	}
	if c.HalfOpenProbes < 0 {
		bad("half_open_probes", "must not be negative, got %d", c.HalfOpenProbes)
	} else if c.HalfOpenProbes == 0 {
		c.HalfOpenProbes = DefaultHalfOpenProbes
	}
	s := settings{}
	statuses := c.FailureStatuses
	if len(statuses) == 0 {
		statuses = DefaultFailureStatuses
	}
	for i, st := range statuses {
		lo, hi, err := parseStatusRange(st)
		if err != nil {
			bad(fmt.Sprintf("failure_statuses[%d]", i), "%q: %v", st, err)
			continue
		}
		s.statuses.add(lo, hi)
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, err
	}
	s.Config = c
	s.rates = c.FailureRate > 0 || c.SlowThreshold > 0
	return s, nil
}

// parseStatusRange parses "503" or "500-599".
func parseStatusRange(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if lo, err = parseStatus(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseStatus(b); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fmt.Errorf("range ends before it starts")
		}
	}
	return lo, hi, nil
}

func parseStatus(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 100 || n > 599 {
		return 0, fmt.Errorf("not a status code or range of them (100-599)")
	}
	return n, nil
}
