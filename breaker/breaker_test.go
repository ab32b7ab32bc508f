package breaker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// t0 is aligned to every bucket width the tests use, so that a time
// window's buckets start at t0 + k*width.
var t0 = time.Unix(1_700_000_000, 0)

var errBoom = errors.New("connect: connection refused")

// step is one event of a transition table: at t0+at, do something n times
// (default once), then the breaker's State must be want.
type step struct {
	at   time.Duration
	do   string // ok, fail, 503, 404, slow, cancel, refused, hold, done-ok, done-fail, done-cancel
	n    int
	want State
}

var outcomes = map[string]endpoint.Outcome{
	"ok":     {Status: 200, Latency: time.Millisecond},
	"404":    {Status: 404, Latency: time.Millisecond},
	"fail":   {Err: errBoom, Latency: time.Millisecond},
	"503":    {Status: 503, Latency: time.Millisecond},
	"slow":   {Status: 200, Latency: 200 * time.Millisecond},
	"cancel": {Err: context.Canceled, Canceled: true, Latency: time.Millisecond},
}

func TestBreakerTransitions(t *testing.T) {
	count := Config{WindowSize: 10, MinRequests: 5, FailureRate: 0.5, OpenFor: 10 * time.Second, MaxOpenFor: 25 * time.Second, HalfOpenProbes: 2}
	timed := count
	timed.WindowType, timed.Window, timed.Buckets = WindowTime, 10*time.Second, 10
	with := func(c Config, f func(*Config)) Config { f(&c); return c }

	// trip opens a breaker of config count or timed at t0.
	trip := []step{{do: "fail", n: 5, want: Open}}
	s := time.Second
	runTransitions(t, []transitionCase{
		{
			name: "count: opens at exactly min_requests with the rate met",
			cfg:  count,
			steps: []step{
				{do: "ok", n: 2, want: Closed},
				{do: "fail", n: 2, want: Closed}, // 50% but only 4 calls
				{do: "fail", want: Open},         // 5th call, 60%
				{do: "refused", want: Open},
			},
			transitions: []string{"closed→open at 0s: open: failure rate 60% over 5 calls"},
		},
		{
			name: "count: a rate under failure_rate keeps it closed",
			cfg:  count,
			steps: []step{
				{do: "ok", n: 6, want: Closed},
				{do: "fail", n: 4, want: Closed}, // 40% of 10
			},
		},
		{
			name: "count: statuses in failure_statuses are failures, others are not",
			cfg:  count,
			steps: []step{
				{do: "404", n: 5, want: Closed},
				{do: "503", n: 4, want: Closed}, // 4 of 9
				{do: "503", want: Open},         // 5 of 10
			},
			transitions: []string{"closed→open at 0s: open: failure rate 50% over 10 calls"},
		},
		{
			name: "count: window sliding drops old outcomes",
			cfg:  count,
			steps: []step{
				{do: "ok", n: 5, want: Closed},
				{do: "fail", n: 4, want: Closed}, // 4 of 9
				{do: "ok", n: 10, want: Closed},  // the failures slid out
				{do: "fail", n: 4, want: Closed}, // 4 of 10, not 8
				{do: "fail", want: Open},         // 5 of 10
			},
			transitions: []string{"closed→open at 0s: open: failure rate 50% over 10 calls"},
		},
		{
			name: "count: slow-call rate opens it",
			cfg:  with(count, func(c *Config) { c.SlowThreshold, c.SlowRate = 100*time.Millisecond, 0.6 }),
			steps: []step{
				{do: "ok", n: 2, want: Closed},
				{do: "slow", n: 2, want: Closed},
				{do: "slow", want: Open}, // 3 of 5
			},
			transitions: []string{"closed→open at 0s: open: slow-call rate 60% over 5 calls (at or over 100ms)"},
		},
		{
			name: "count: consecutive failures open it before min_requests",
			cfg:  with(count, func(c *Config) { c.MinRequests, c.ConsecutiveFailures = 10, 3 }),
			steps: []step{
				{do: "fail", n: 2, want: Closed},
				{do: "ok", want: Closed}, // breaks the run
				{do: "fail", n: 2, want: Closed},
				{do: "fail", want: Open},
			},
			transitions: []string{"closed→open at 0s: open: 3 consecutive failures"},
		},
		{
			name: "count: canceled outcomes are ignored",
			cfg:  count,
			steps: []step{
				{do: "fail", n: 4, want: Closed},
				{do: "cancel", n: 20, want: Closed}, // neither calls nor failures nor a break in the run
				{do: "fail", want: Open},
			},
			transitions: []string{"closed→open at 0s: open: failure rate 100% over 5 calls"},
		},
		{
			name: "open: refused until open_for, then half-open",
			cfg:  count,
			steps: append(slices.Clone(trip),
				step{at: 10*s - 1, do: "refused", want: Open},
				step{at: 10 * s, want: HalfOpen},
			),
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
			},
		},
		{
			name: "half-open: all probes succeed, it closes",
			cfg:  count,
			steps: append(slices.Clone(trip),
				step{at: 10 * s, do: "ok", want: HalfOpen},
				step{at: 10 * s, do: "ok", want: Closed},
				step{at: 10 * s, do: "fail", n: 4, want: Closed}, // a fresh window
			),
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→closed at 10s: closed: 2 probes succeeded",
			},
		},
		{
			name: "half-open: one probe fails, it reopens with open_for doubled up to max_open_for",
			cfg:  count,
			steps: append(slices.Clone(trip),
				step{at: 10 * s, do: "ok", want: HalfOpen},
				step{at: 10 * s, do: "fail", want: Open},
				step{at: 30*s - 1, do: "refused", want: Open},
				step{at: 30 * s, do: "fail", want: Open}, // 20s elapsed; the probe fails
				step{at: 55*s - 1, do: "refused", want: Open},
				step{at: 55 * s, do: "fail", want: Open}, // capped at 25s
				step{at: 80 * s, do: "ok", n: 2, want: Closed},
				step{at: 80 * s, do: "fail", n: 5, want: Open}, // open_for back to 10s
				step{at: 90*s - 1, do: "refused", want: Open},
				step{at: 90 * s, want: HalfOpen},
			),
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→open at 10s: open: probe failed, open for 20s",
				"open→half-open at 30s: half-open: open for 20s elapsed",
				"half-open→open at 30s: open: probe failed, open for 25s",
				"open→half-open at 55s: half-open: open for 25s elapsed",
				"half-open→open at 55s: open: probe failed, open for 25s",
				"open→half-open at 1m20s: half-open: open for 25s elapsed",
				"half-open→closed at 1m20s: closed: 2 probes succeeded",
				"closed→open at 1m20s: open: failure rate 100% over 5 calls",
				"open→half-open at 1m30s: half-open: open for 10s elapsed",
			},
		},
		{
			name: "half-open: ErrOpen while the probe slots are taken; a canceled probe frees its slot",
			cfg:  count,
			steps: append(slices.Clone(trip),
				step{at: 10 * s, do: "hold", n: 2, want: HalfOpen},
				step{at: 11 * s, do: "refused", want: HalfOpen},
				step{at: 11 * s, do: "done-cancel", want: HalfOpen},
				step{at: 11 * s, do: "hold", want: HalfOpen},
				step{at: 11 * s, do: "refused", want: HalfOpen},
				step{at: 12 * s, do: "done-ok", n: 2, want: Closed},
			),
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→closed at 12s: closed: 2 probes succeeded",
			},
		},
		{
			name: "half-open: a slow probe reopens when slow calls are tracked",
			cfg:  with(count, func(c *Config) { c.SlowThreshold = 100 * time.Millisecond }),
			steps: append(slices.Clone(trip),
				step{at: 10 * s, do: "slow", want: Open},
			),
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→open at 10s: open: probe slow (200ms, at or over 100ms), open for 20s",
			},
		},
		{
			name: "a call admitted before the breaker opened does not count as a probe",
			cfg:  count,
			steps: []step{
				{do: "hold", want: Closed},
				{do: "fail", n: 5, want: Open},
				{at: 10 * s, want: HalfOpen},
				{at: 10 * s, do: "done-ok", want: HalfOpen}, // stale: dropped
				{at: 10 * s, do: "ok", n: 2, want: Closed},
			},
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→closed at 10s: closed: 2 probes succeeded",
			},
		},
		{
			name: "a call admitted before the breaker opened and closed again does not count in the new window",
			cfg:  count,
			steps: []step{
				{do: "hold", want: Closed},
				{do: "fail", n: 5, want: Open},
				{at: 10 * s, do: "ok", n: 2, want: Closed},
				{at: 10 * s, do: "done-fail", want: Closed},  // stale: dropped
				{at: 10 * s, do: "fail", n: 4, want: Closed}, // 4 of 4, under min_requests 5
				{at: 10 * s, do: "fail", want: Open},
			},
			transitions: []string{
				"closed→open at 0s: open: failure rate 100% over 5 calls",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→closed at 10s: closed: 2 probes succeeded",
				"closed→open at 10s: open: failure rate 100% over 5 calls",
			},
		},
		{
			name: "time: opens at exactly min_requests with the rate met",
			cfg:  timed,
			steps: []step{
				{do: "fail", n: 4, want: Closed},
				{at: 9900 * time.Millisecond, do: "fail", want: Open}, // still in the window
			},
			transitions: []string{"closed→open at 9.9s: open: failure rate 100% over 5 calls"},
		},
		{
			name: "time: window sliding drops old buckets",
			cfg:  timed,
			steps: []step{
				{do: "fail", n: 4, want: Closed},
				{at: 10 * s, do: "fail", want: Closed}, // the t0 bucket slid out: 1 call
				{at: 10 * s, do: "ok", n: 3, want: Closed},
				{at: 15 * s, do: "fail", want: Closed}, // 2 of 5
				{at: 15 * s, do: "fail", want: Open},   // 3 of 6
			},
			transitions: []string{"closed→open at 15s: open: failure rate 50% over 6 calls"},
		},
		{
			name: "time: a long quiet period empties the window",
			cfg:  timed,
			steps: []step{
				{do: "fail", n: 4, want: Closed},
				{at: time.Hour, do: "fail", n: 4, want: Closed},
				{at: time.Hour + 500*time.Millisecond, do: "fail", want: Open},
			},
			transitions: []string{"closed→open at 1h0m0.5s: open: failure rate 100% over 5 calls"},
		},
		{
			name: "time: slow-call rate and half-open cycle",
			cfg:  with(timed, func(c *Config) { c.SlowThreshold = 100 * time.Millisecond }),
			steps: []step{
				{do: "slow", n: 4, want: Closed},
				{at: s, do: "slow", want: Open},
				{at: 11 * s, do: "ok", n: 2, want: Closed},
			},
			transitions: []string{
				"closed→open at 1s: open: slow-call rate 100% over 5 calls (at or over 100ms)",
				"open→half-open at 11s: half-open: open for 10s elapsed",
				"half-open→closed at 11s: closed: 2 probes succeeded",
			},
		},
	})
}

// transitionCase is a config, steps run on a breaker of it, and every
// transition the breaker must announce on the way.
type transitionCase struct {
	name        string
	cfg         Config
	steps       []step
	transitions []string
}

func runTransitions(t *testing.T, tests []transitionCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			b.OnStateChange(func(from, to State, reason string, at time.Time) {
				got = append(got, fmt.Sprintf("%v→%v at %v: %s", from, to, at.Sub(t0), reason))
			})
			var held []Ticket
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				for range max(st.n, 1) {
					switch st.do {
					case "":
					case "refused":
						if _, err := b.Allow(now); !errors.Is(err, ErrOpen) {
							t.Fatalf("step %d (%s at %v): Allow = %v, want ErrOpen", i, st.do, st.at, err)
						}
					case "hold":
						tk, err := b.Allow(now)
						if err != nil {
							t.Fatalf("step %d (%s at %v): Allow: %v", i, st.do, st.at, err)
						}
						held = append(held, tk)
					case "done-ok", "done-fail", "done-cancel":
						tk := held[0]
						held = held[1:]
						tk.Done(outcomes[strings.TrimPrefix(st.do, "done-")], now)
					default:
						o, ok := outcomes[st.do]
						if !ok {
							t.Fatalf("step %d: unknown action %q", i, st.do)
						}
						tk, err := b.Allow(now)
						if err != nil {
							t.Fatalf("step %d (%s at %v): Allow: %v", i, st.do, st.at, err)
						}
						tk.Done(o, now)
					}
				}
				if s := b.State(now); s != st.want {
					t.Fatalf("step %d (%s x%d at %v): state %v, want %v; transitions so far:\n%s",
						i, st.do, max(st.n, 1), st.at, s, st.want, strings.Join(got, "\n"))
				}
			}
			if !slices.Equal(got, tt.transitions) {
				t.Errorf("transitions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.transitions, "\n"))
			}
		})
	}
}

// failure_count: N failures within the window open the breaker however
// many calls succeeded, the breaker our users know from Python ("5
// failures in 60 s"). Time is a parameter, so the window slides under the
// test's control.
func TestBreakerFailureCount(t *testing.T) {
	s := time.Second
	// 60 buckets of 1s: a failure counts for 59-60s, by its bucket.
	timed := Config{WindowType: WindowTime, Window: time.Minute, Buckets: 60, FailureCount: 5, OpenFor: 10 * s, HalfOpenProbes: 1}
	count := Config{WindowSize: 10, FailureCount: 3, OpenFor: 10 * s, HalfOpenProbes: 1}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	runTransitions(t, []transitionCase{
		{
			name: "time: N-1 failures among many successes stay closed; the Nth opens",
			cfg:  timed,
			steps: []step{
				{do: "ok", n: 1000, want: Closed},
				{at: 1 * s, do: "fail", want: Closed},
				{at: 2 * s, do: "ok", n: 1000, want: Closed},
				{at: 3 * s, do: "fail", n: 3, want: Closed}, // 4 failures among 2004 calls
				{at: 4 * s, do: "ok", n: 1000, want: Closed},
				{at: 59 * s, do: "fail", want: Open}, // 5 within the minute, a 0.17% failure rate
				{at: 59 * s, do: "refused", want: Open},
			},
			transitions: []string{"closed→open at 59s: open: 5 failures within 1m0s"},
		},
		{
			name: "time: failures that slid out of the window do not count",
			cfg:  timed,
			steps: []step{
				{at: 0, do: "fail", want: Closed},
				{at: 10 * s, do: "fail", want: Closed},
				{at: 20 * s, do: "fail", want: Closed},
				{at: 30 * s, do: "fail", want: Closed},
				{at: 60 * s, do: "fail", want: Closed}, // the one at 0s slid out at 60s: 4
				{at: 70 * s, do: "fail", want: Closed}, // the one at 10s slid out at 70s: 4
				{at: 70 * s, do: "fail", want: Open},   // 20s, 30s, 60s, 70s, 70s
			},
			transitions: []string{"closed→open at 1m10s: open: 5 failures within 1m0s"},
		},
		{
			name: "time: a failure counts until its bucket slides out",
			cfg:  timed,
			steps: []step{
				{at: 500 * time.Millisecond, do: "fail", n: 4, want: Closed},
				{at: 59*s + 999*time.Millisecond, do: "fail", want: Open}, // the bucket [0s, 1s) is still in
			},
			transitions: []string{"closed→open at 59.999s: open: 5 failures within 1m0s"},
		},
		{
			name: "time: a failure stops counting when its bucket slides out",
			cfg:  timed,
			steps: []step{
				{at: 500 * time.Millisecond, do: "fail", n: 4, want: Closed},
				{at: 59*s + 999*time.Millisecond, do: "ok", want: Closed},
				{at: 60 * s, do: "fail", want: Closed}, // the bucket of 0.5s [0s, 1s) left at 60s: 1 failure
				{at: 61 * s, do: "fail", n: 3, want: Closed},
				{at: 62 * s, do: "fail", want: Open},
			},
			transitions: []string{"closed→open at 1m2s: open: 5 failures within 1m0s"},
		},
		{
			name: "time: the failure-rate rule is off unless failure_rate is set",
			cfg:  with(timed, func(c *Config) { c.MinRequests = 2 }),
			steps: []step{
				{do: "fail", n: 4, want: Closed}, // 100% over 4 calls
			},
		},
		{
			name: "time: with failure_rate set as well, either rule opens it",
			cfg:  with(timed, func(c *Config) { c.MinRequests, c.FailureRate = 4, 0.5 }),
			steps: []step{
				{do: "ok", n: 2, want: Closed},
				{do: "fail", n: 2, want: Open}, // 50% over 4 calls, before 5 failures
			},
			transitions: []string{"closed→open at 0s: open: failure rate 50% over 4 calls"},
		},
		{
			name: "time: canceled outcomes are not failures; slow successes are not either",
			cfg:  with(timed, func(c *Config) { c.SlowThreshold = 100 * time.Millisecond }),
			steps: []step{
				{do: "fail", n: 4, want: Closed},
				{do: "cancel", n: 10, want: Closed},
				{do: "slow", n: 10, want: Closed},
				{do: "503", want: Open},
			},
			transitions: []string{"closed→open at 0s: open: 5 failures within 1m0s"},
		},
		{
			name: "time: successes still count for slow_rate alongside failure_count",
			cfg:  with(timed, func(c *Config) { c.SlowThreshold, c.SlowRate, c.MinRequests = 100*time.Millisecond, 0.5, 4 }),
			steps: []step{
				{do: "ok", n: 2, want: Closed},
				{do: "slow", want: Closed},
				{do: "slow", want: Open}, // 2 of 4
			},
			transitions: []string{"closed→open at 0s: open: slow-call rate 50% over 4 calls (at or over 100ms)"},
		},
		{
			name: "time: a closed breaker starts with an empty window",
			cfg:  timed,
			steps: []step{
				{do: "fail", n: 5, want: Open},
				{at: 10 * s, do: "ok", want: Closed},
				{at: 10 * s, do: "fail", n: 4, want: Closed},
				{at: 11 * s, do: "fail", want: Open},
			},
			transitions: []string{
				"closed→open at 0s: open: 5 failures within 1m0s",
				"open→half-open at 10s: half-open: open for 10s elapsed",
				"half-open→closed at 10s: closed: 1 probe succeeded",
				"closed→open at 11s: open: 5 failures within 1m0s",
			},
		},
		{
			name: "count: N failures among the last window_size calls",
			cfg:  count,
			steps: []step{
				{do: "fail", n: 2, want: Closed},
				{do: "ok", n: 8, want: Closed},   // 2 of 10
				{do: "ok", n: 2, want: Closed},   // both slid out: 0 of 10
				{do: "fail", n: 2, want: Closed}, // 2 of 10
				{do: "fail", want: Open},         // 3 of 10
			},
			transitions: []string{"closed→open at 0s: open: 3 failures within the last 10 calls"},
		},
	})
}
