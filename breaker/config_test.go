package breaker

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

func TestConfigValidateNamesTheKey(t *testing.T) {
	tests := []struct {
		cfg     Config
		key     string
		message string
	}{
		{Config{FailureRate: 1.5}, "failure_rate", "failure_rate: must be between 0 and 1, got 1.5"},
		{Config{FailureRate: -0.1}, "failure_rate", "failure_rate: must be between 0 and 1, got -0.1"},
		{Config{SlowRate: 2}, "slow_rate", "slow_rate: must be between 0 and 1, got 2"},
		{Config{WindowType: "sliding"}, "window_type", `window_type: must be "count" or "time", got "sliding"`},
		{Config{WindowSize: -1}, "window_size", "window_size: must not be negative, got -1"},
		{Config{Window: -time.Second}, "window", "window: must not be negative, got -1s"},
		{Config{Buckets: -2}, "buckets", "buckets: must not be negative, got -2"},
		{Config{WindowType: WindowTime, Window: 5 * time.Millisecond, Buckets: 10}, "buckets", "buckets: window 5ms cut into 10 buckets leaves less than 1ms each"},
		{Config{MinRequests: -1}, "min_requests", "min_requests: must not be negative, got -1"},
		{Config{WindowSize: 10, MinRequests: 11}, "min_requests", "min_requests: 11 is more than window_size 10: the failure rate could never open the breaker"},
		{Config{FailureCount: -1}, "failure_count", "failure_count: must not be negative, got -1"},
		{Config{WindowSize: 10, FailureCount: 11}, "failure_count", "failure_count: 11 is more than window_size 10: the window never holds that many failures"},
		{Config{WindowSize: 10, MinRequests: 11, FailureCount: 5, SlowThreshold: time.Second}, "min_requests", "min_requests: 11 is more than window_size 10: the slow-call rate could never open the breaker"},
		{Config{SlowThreshold: -time.Millisecond}, "slow_threshold", "slow_threshold: must not be negative, got -1ms"},
		{Config{ConsecutiveFailures: -3}, "consecutive_failures", "consecutive_failures: must not be negative, got -3"},
		{Config{OpenFor: -time.Second}, "open_for", "open_for: must not be negative, got -1s"},
		{Config{MaxOpenFor: -time.Second}, "max_open_for", "max_open_for: must not be negative, got -1s"},
		{Config{OpenFor: time.Minute, MaxOpenFor: time.Second}, "max_open_for", "max_open_for: 1s is less than open_for 1m0s"},
		{Config{HalfOpenProbes: -1}, "half_open_probes", "half_open_probes: must not be negative, got -1"},
		{Config{FailureStatuses: []string{"500", "5xx"}}, "failure_statuses[1]", `failure_statuses[1]: "5xx": not a status code or range of them (100-599)`},
		{Config{FailureStatuses: []string{"599-500"}}, "failure_statuses[0]", `failure_statuses[0]: "599-500": range ends before it starts`},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil {
			t.Errorf("%+v: Validate = nil, want %q", tt.cfg, tt.message)
			continue
		}
		if err.Error() != tt.message {
			t.Errorf("%+v: Validate = %q, want %q", tt.cfg, err, tt.message)
		}
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Path != tt.key {
			t.Errorf("%+v: Validate error key = %v, want %q", tt.cfg, fe, tt.key)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := Config{FailureRate: 1.5, OpenFor: -time.Second}.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("Validate = %v, want 2 joined field errors", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	s, err := Config{}.build()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		WindowType: WindowCount, WindowSize: 100, Window: time.Minute, Buckets: 10,
		MinRequests: 20, FailureRate: 0.5, SlowRate: 1, OpenFor: 30 * time.Second,
		MaxOpenFor: 5 * time.Minute, HalfOpenProbes: 3,
	}
	got := s.Config
	got.FailureStatuses = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	for code, failed := range map[int]bool{200: false, 404: false, 429: false, 499: false, 500: true, 503: true, 599: true, 0: false} {
		if s.statuses.has(code) != failed {
			t.Errorf("default failure_statuses: %d counted as failure = %v, want %v", code, !failed, failed)
		}
	}
}

func TestConfigFailureStatuses(t *testing.T) {
	s, err := Config{FailureStatuses: []string{"429", " 502 - 504 "}}.build()
	if err != nil {
		t.Fatal(err)
	}
	for code, failed := range map[int]bool{428: false, 429: true, 430: false, 500: false, 502: true, 503: true, 504: true, 505: false} {
		if s.statuses.has(code) != failed {
			t.Errorf("failure_statuses [429, 502-504]: %d counted as failure = %v, want %v", code, !failed, failed)
		}
	}
}

// failure_count is a mode of its own: it turns the failure-rate rule off
// unless failure_rate is set too, and then min_requests (which only the
// rates use) is not checked against window_size.
func TestConfigFailureCountTurnsTheRateRuleOff(t *testing.T) {
	tests := []struct {
		cfg  Config
		rate float64
	}{
		{Config{FailureCount: 5}, 0},
		{Config{FailureCount: 5, FailureRate: 0.3}, 0.3},
		{Config{WindowSize: 10, FailureCount: 5}, 0}, // min_requests 20 > window_size 10 does not matter
		{Config{WindowType: WindowTime, FailureCount: 1000}, 0},
		{Config{}, DefaultFailureRate},
	}
	for _, tt := range tests {
		s, err := tt.cfg.build()
		if err != nil {
			t.Errorf("%+v: %v", tt.cfg, err)
			continue
		}
		if s.FailureRate != tt.rate {
			t.Errorf("%+v: failure_rate %g, want %g", tt.cfg, s.FailureRate, tt.rate)
		}
	}
}
