//go:build unix

package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/ratelimit"
)

// redisServer is a redis-server process of the test's own.
type redisServer struct {
	addr string
	srv  *testutil.RedisServer
}

// startRedis starts a redis-server for t (skipped without one, except
// under CI=true; see testutil.StartRedis).
func startRedis(t *testing.T) *redisServer {
	s := testutil.StartRedis(t)
	return &redisServer{addr: s.Addr, srv: s}
}

func (s *redisServer) signal(t *testing.T, sig syscall.Signal) { s.srv.Signal(t, sig) }

// client returns a client of its own, as a separate process would have.
func (s *redisServer) client(t *testing.T) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func newLimiter(t *testing.T, s *redisServer, limit ratelimit.Config, cfg Config, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(s.client(t), limit, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestThreeInstancesShareOneBurst: three limiters with separate clients,
// as three switchboard processes, hammering one key at once admit exactly
// the burst when the refill is negligible.
func TestThreeInstancesShareOneBurst(t *testing.T) {
	s := startRedis(t)
	limit, cfg := ratelimit.Config{Rate: "1/h", Burst: 100}, Config{OnFailure: FailClosed}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		l := newLimiter(t, s, limit, cfg)
		for range 4 {
			wg.Go(func() {
				for range 100 {
					if l.AllowN(context.Background(), "shared", time.Now(), 1).Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("3 instances x 400 attempts admitted %d, want exactly the burst 100", got)
	}
}

// TestThreeInstancesStayWithinTheGlobalRate: over a bounded run of attempts
// the three together admit at most (burst + rate*elapsed) * 1.01, and not
// far below it (the limit is not met by rejecting everything).
func TestThreeInstancesStayWithinTheGlobalRate(t *testing.T) {
	s := startRedis(t)
	const rate, burst, attempts = 1000.0, 50, 3000
	lc, cfg := ratelimit.Config{Rate: "1000/s", Burst: burst}, Config{OnFailure: FailClosed, Timeout: time.Second}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 3 {
		l := newLimiter(t, s, lc, cfg)
		wg.Go(func() {
			for range attempts {
				if l.AllowN(context.Background(), "rate", time.Now(), 1).Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	limit := float64(burst) + rate*elapsed.Seconds()
	got := float64(admitted.Load())
	t.Logf("%d attempts in %v: admitted %.0f, limit burst+rate*elapsed = %.1f", 3*attempts, elapsed, got, limit)
	if got > limit*1.01 {
		t.Fatalf("admitted %.0f in %v, more than (burst + rate*elapsed) * 1.01 = %.1f", got, elapsed, limit*1.01)
	}
	if got < 0.8*rate*elapsed.Seconds() {
		t.Fatalf("admitted %.0f in %v, far below the rate (%.0f)", got, elapsed, rate*elapsed.Seconds())
	}
}

func TestResultsCarryRemainingResetAndRetryAfter(t *testing.T) {
	s := startRedis(t)
	l := newLimiter(t, s, ratelimit.Config{Rate: "1/s", Burst: 3}, Config{OnFailure: FailClosed, Prefix: "t:"})
	ctx := context.Background()
	res := l.AllowN(ctx, "k", time.Now(), 1)
	if !res.Allowed || res.Limit != 3 || res.Remaining != 2 || res.ResetAfter != time.Second {
		t.Fatalf("first: %+v, want allowed, limit 3, remaining 2, reset 1s", res)
	}
	l.AllowN(ctx, "k", time.Now(), 2)
	res = l.AllowN(ctx, "k", time.Now(), 1)
	// The server's clock moved a little between calls: allow 100ms.
	if res.Allowed || res.Remaining != 0 || res.RetryAfter <= 900*time.Millisecond || res.RetryAfter > time.Second ||
		res.ResetAfter <= 2900*time.Millisecond || res.ResetAfter > 3*time.Second {
		t.Fatalf("fourth: %+v, want rejected, remaining 0, retry ~1s, reset ~3s", res)
	}
	if res := l.AllowN(ctx, "k", time.Now(), 4); res.Allowed {
		t.Fatalf("n above burst: %+v, want rejected", res)
	}
	// The key expires when the bucket is full again.
	ttl, err := s.client(t).PTTL(ctx, "t:k").Result()
	if err != nil || ttl <= 2*time.Second || ttl > 3*time.Second {
		t.Fatalf("PTTL = %v, %v; want about 3s", ttl, err)
	}
}

func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	s := startRedis(t)
	c := s.client(t)
	l, err := New(c, ratelimit.Config{Rate: "10/s", Burst: 10}, Config{OnFailure: FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if res := l.AllowN(ctx, "k", time.Now(), 1); !res.Allowed {
			t.Fatalf("call %d after SCRIPT FLUSH: %+v", i, res)
		}
	}
	if n := l.Failures(); n != 0 {
		t.Fatalf("%d failures, want 0: NOSCRIPT must fall back to EVAL", n)
	}
}

// TestRedisDownFailOpenAndFailClosed stops Redis mid-test, first by
// SIGSTOP (it hangs: every call must give up at the timeout) and then by
// SIGKILL (connections are refused). fail_open decides locally at its
// share of the burst; fail_closed rejects; no call waits longer than the
// timeout plus a margin. The margin is for a loaded 2-core -race run (a
// call took 82ms once next to other packages' tests); a call that waited
// for a TCP timeout or for Redis to come back would take seconds.
func TestRedisDownFailOpenAndFailClosed(t *testing.T) {
	const timeout, margin = 50 * time.Millisecond, 200 * time.Millisecond
	s := startRedis(t)
	var openErrs, closedErrs atomic.Int64
	open := newLimiter(t, s, ratelimit.Config{Rate: "1000/s", Burst: 100}, Config{LocalShare: 0.34, Recheck: 20 * time.Millisecond},
		WithErrorHandler(func(error) { openErrs.Add(1) }))
	closed := newLimiter(t, s, ratelimit.Config{Rate: "1000/s", Burst: 100}, Config{OnFailure: FailClosed, Recheck: 20 * time.Millisecond},
		WithErrorHandler(func(error) { closedErrs.Add(1) }))
	ctx := context.Background()
	for _, l := range []*Limiter{open, closed} {
		if res := l.AllowN(ctx, "k", time.Now(), 1); !res.Allowed {
			t.Fatalf("with Redis up: %+v", res)
		}
	}

	// timed calls both limiters for d of real time, with real clocks so
	// that the recheck lets a request probe Redis every 20ms.
	timed := func(phase string, d time.Duration) {
		t.Helper()
		var slowest time.Duration
		calls, probes := 0, openErrs.Load()+closedErrs.Load()
		for end := time.Now().Add(d); time.Now().Before(end); calls++ {
			for _, l := range []*Limiter{open, closed} {
				start := time.Now()
				res := l.AllowN(ctx, fmt.Sprint("k", calls%10), start, 1)
				took := time.Since(start)
				slowest = max(slowest, took)
				if took > timeout+margin {
					t.Fatalf("%s: a call took %v, more than timeout %v + %v", phase, took, timeout, margin)
				}
				if l == closed && res.Allowed {
					t.Fatalf("%s: fail_closed admitted a request with Redis down", phase)
				}
			}
		}
		probes = openErrs.Load() + closedErrs.Load() - probes
		t.Logf("%s: %d calls per limiter, %d failed probes of Redis, slowest call %v", phase, calls, probes, slowest)
		if probes < 2 {
			t.Fatalf("%s: only %d calls reached Redis; the test did not exercise the timeout", phase, probes)
		}
	}

	s.signal(t, syscall.SIGSTOP)
	timed("redis stopped (SIGSTOP)", 300*time.Millisecond)

	// fail_open decides with the local bucket, 34% of the burst of 100,
	// for every call at one instant (one of them may first probe Redis).
	now := time.Now()
	admitted := 0
	for range 200 {
		if open.AllowN(ctx, "local", now, 1).Allowed {
			admitted++
		}
	}
	if admitted != 34 {
		t.Fatalf("fail_open with Redis down admitted %d at one instant, want local share 0.34 x burst 100 = 34", admitted)
	}
	if !open.Degraded(now) || open.Failures() == 0 || closed.Failures() == 0 {
		t.Fatalf("Degraded %v, failures %d and %d: want degraded and failures counted", open.Degraded(now), open.Failures(), closed.Failures())
	}
	if uint64(openErrs.Load()) != open.Failures() {
		t.Fatalf("error handler saw %d failures, Failures() = %d", openErrs.Load(), open.Failures())
	}

	// Back from SIGSTOP: after the recheck a probe finds Redis and it
	// decides again.
	s.signal(t, syscall.SIGCONT)
	deadline := time.Now().Add(5 * time.Second)
	for {
		open.AllowN(ctx, "fresh", time.Now(), 0)
		if !open.Degraded(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still degraded 5s after Redis resumed")
		}
		time.Sleep(5 * time.Millisecond)
	}

	s.signal(t, syscall.SIGKILL)
	timed("redis killed", 300*time.Millisecond)
}

func TestNewRefusesAClientThatIgnoresDeadlines(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := New(c, ratelimit.Config{Rate: "1/s", Burst: 1}, Config{OnFailure: FailClosed})
	if err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New with ContextTimeoutEnabled false: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	type limit = ratelimit.Config
	closed := Config{OnFailure: FailClosed}
	for _, tc := range []struct {
		limit limit
		cfg   Config
		msg   string
	}{
		{limit{Rate: "0/s", Burst: 1}, closed, `rate: must be N/UNIT like 100/s, got "0/s": N must be at least 1`},
		{limit{Rate: "10/s"}, closed, `burst: must be at least 1, got 0`},
		{limit{Rate: "2000000/s", Burst: 1}, closed, `rate: 2000000/s is more than one event per microsecond, the resolution of the Redis limiter`},
		{limit{Rate: "1/h", Burst: 2_550_000}, closed, `burst: 2550000 at 1/h is too large for the Redis limiter`}, // under 290 years, over 2^53µs
		{limit{Algorithm: ratelimit.LeakyBucketName, Rate: "10/s", Queue: 5}, closed, `algorithm: a global limit is a token bucket; "leaky_bucket" cannot be global`},
		{limit{Rate: "10/s", Burst: 1, Queue: 5}, closed, `queue: not used by token_bucket (only by leaky_bucket)`},
		{limit{Rate: "10/s", Burst: 1}, Config{}, `local_share: required with on_failure fail_open: the share of the global limit one process admits while Redis fails, e.g. 0.34 for three processes`},
		{limit{Rate: "10/s", Burst: 1}, Config{LocalShare: 1.5}, `local_share: must be more than 0 and at most 1, got 1.5`},
		{limit{Rate: "10/s", Burst: 1}, Config{OnFailure: "fail_slow"}, `on_failure: "fail_slow" is unknown (known: fail_open, fail_closed)`},
		{limit{Rate: "10/s", Burst: 1}, Config{OnFailure: FailClosed, LocalShare: 0.5}, `local_share: only used with on_failure fail_open`},
		{limit{Rate: "10/s", Burst: 1}, Config{OnFailure: FailClosed, Timeout: -time.Second}, `timeout: must not be negative, got -1s`},
		{limit{Rate: "10/s", Burst: 1, Key: "cookie:sid"}, closed, `key: "cookie:sid" is unknown: want client_ip, header:NAME, path or route`},
		{limit{Rate: "10/s", Burst: 1, Key: "path", TrustedProxies: []string{"10.0.0.0/8"}}, closed, `trusted_proxies: needs key client_ip`},
		{limit{Rate: "0/s", Burst: 1}, Config{Recheck: -1, LocalShare: 0.5}, "rate: must be N/UNIT like 100/s, got \"0/s\": N must be at least 1\nrecheck: must not be negative, got -1ns"},
	} {
		err := errors.Join(ValidateLimit(tc.limit), tc.cfg.Validate())
		if err == nil || err.Error() != tc.msg {
			t.Errorf("ValidateLimit(%+v), Validate(%+v):\n got %v\nwant %s", tc.limit, tc.cfg, err, tc.msg)
		}
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
		if _, err := New(c, tc.limit, tc.cfg); err == nil || err.Error() != tc.msg {
			t.Errorf("New(%+v, %+v) = %v, want the same error as the Validate functions", tc.limit, tc.cfg, err)
		}
		c.Close()
	}
	if err := ValidateLimit(limit{Rate: "1000/s", Burst: 100}); err != nil {
		t.Errorf("a good limit: %v", err)
	}
	if err := (Config{LocalShare: 0.34}).Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := New(c, limit{Rate: "10/s", Burst: 1, Key: "client_ip", TrustedProxies: []string{"10.0.0.0/8"}}, closed)
	if err != nil {
		t.Fatal(err)
	}
	if src := l.Source(); src.Kind != "client_ip" || len(src.TrustedProxies) != 1 {
		t.Errorf("Source() = %+v, want client_ip with one trusted prefix", src)
	}
}
