package breaker

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestConfigValidateNamesTheKey(t *testing.T) {
	tests := []struct {
		cfg     Config
		key     string
		message string
	}{
		{Config{FailureRate: 1.5}, "failure_rate", "failure_rate 1.5: must be between 0 and 1"},
		{Config{FailureRate: -0.1}, "failure_rate", "failure_rate -0.1: must be between 0 and 1"},
		{Config{SlowRate: 2}, "slow_rate", "slow_rate 2: must be between 0 and 1"},
		{Config{WindowType: "sliding"}, "window_type", `window_type "sliding": must be "count" or "time"`},
		{Config{WindowSize: -1}, "window_size", "window_size -1: must not be negative"},
		{Config{Window: -time.Second}, "window", "window -1s: must not be negative"},
		{Config{Buckets: -2}, "buckets", "buckets -2: must not be negative"},
		{Config{WindowType: WindowTime, Window: 5 * time.Millisecond, Buckets: 10}, "buckets", "buckets 10: window 5ms cut into 10 buckets leaves less than 1ms each"},
		{Config{MinRequests: -1}, "min_requests", "min_requests -1: must not be negative"},
		{Config{WindowSize: 10, MinRequests: 11}, "min_requests", "min_requests 11: more than window_size 10, the failure rate could never open the breaker"},
		{Config{SlowThreshold: -time.Millisecond}, "slow_threshold", "slow_threshold -1ms: must not be negative"},
		{Config{ConsecutiveFailures: -3}, "consecutive_failures", "consecutive_failures -3: must not be negative"},
		{Config{OpenFor: -time.Second}, "open_for", "open_for -1s: must not be negative"},
		{Config{MaxOpenFor: -time.Second}, "max_open_for", "max_open_for -1s: must not be negative"},
		{Config{OpenFor: time.Minute, MaxOpenFor: time.Second}, "max_open_for", "max_open_for 1s: must not be less than open_for 1m0s"},
		{Config{HalfOpenProbes: -1}, "half_open_probes", "half_open_probes -1: must not be negative"},
		{Config{FailureStatuses: []string{"5xx"}}, "failure_statuses", `failure_statuses "5xx": not a status code or range of them (100-599)`},
		{Config{FailureStatuses: []string{"599-500"}}, "failure_statuses", `failure_statuses "599-500": range ends before it starts`},
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
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != tt.key {
			t.Errorf("%+v: Validate error key = %v, want %q", tt.cfg, fe, tt.key)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := Config{FailureRate: 1.5, OpenFor: -time.Second}.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("Validate = %v, want 2 joined FieldErrors", err)
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
