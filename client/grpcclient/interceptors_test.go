package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
)

const unaryMethod = "/grpc.testing.TestService/UnaryCall"

// oneServer registers one server for service and returns a client with
// the given options.
func oneServer(t *testing.T, opts ...grpc.DialOption) (*testServer, func(opts ...grpc.CallOption) (string, error)) {
	s, c := oneServerClient(t, opts...)
	return s, func(opts ...grpc.CallOption) (string, error) { return call(context.Background(), c, opts...) }
}

func oneServerClient(t *testing.T, opts ...grpc.DialOption) (*testServer, testgrpc.TestServiceClient) {
	t.Helper()
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	return s, dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""), opts...)
}

// The breaker opens after the failures its config allows; then calls fail
// fast without reaching the server, and the fallback answers them, marked
// degraded in the header and trailer metadata.
func TestBreakerOpensAndTheFallbackAnswersDegraded(t *testing.T) {
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 3, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cached := grpcclient.FallbackStep{Name: "cache", Func: func(_ context.Context, method string, _, reply any, cause error) error {
		if method != unaryMethod || cause == nil {
			t.Errorf("fallback got method %q, cause %v", method, cause)
		}
		reply.(*testgrpc.SimpleResponse).ServerId = "cached"
		return nil
	}}
	s, do := oneServer(t, grpc.WithChainUnaryInterceptor(
		grpcclient.UnaryFallback(0, cached),
		grpcclient.UnaryBreaker(br, 0),
	))
	if id, err := do(); err != nil || id != "a" {
		t.Fatalf("healthy call: %q, %v", id, err)
	}
	s.fail.Store(uint32(codes.Unavailable))
	for i := range 3 {
		var header, trailer metadata.MD
		id, err := do(grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil || id != "cached" {
			t.Fatalf("failing call %d: %q, %v; want the fallback's answer", i, id, err)
		}
		for name, md := range map[string]metadata.MD{"header": header, "trailer": trailer} {
			if r, ok := grpcclient.Degraded(md); !ok || r != "cache: code:Unavailable" {
				t.Fatalf("failing call %d: %s degraded %q, %v; want \"cache: code:Unavailable\"", i, name, r, ok)
			}
		}
	}
	if got := br.State(time.Now()); got != breaker.Open {
		t.Fatalf("after 3 failures in a row the breaker is %v; want open", got)
	}
	calls := s.calls.Load()
	var header metadata.MD
	id, err := do(grpc.Header(&header))
	if err != nil || id != "cached" {
		t.Fatalf("call with the breaker open: %q, %v; want the fallback's answer", id, err)
	}
	if r, _ := grpcclient.Degraded(header); r != "cache: breaker_open" {
		t.Fatalf("call with the breaker open: degraded %q; want \"cache: breaker_open\"", r)
	}
	if n := s.calls.Load() - calls; n != 0 {
		t.Fatalf("the server got %d calls while the breaker was open", n)
	}
}

// Codes that say the request was bad do not open the breaker, and without
// a fallback an open breaker fails calls with ErrBreakerOpen.
func TestBreakerCountsOnlyFailureCodes(t *testing.T) {
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, do := oneServer(t, grpc.WithUnaryInterceptor(grpcclient.UnaryBreaker(br, grpcclient.CodeSet(codes.Internal))))
	for _, c := range []codes.Code{codes.NotFound, codes.Unavailable, codes.InvalidArgument, codes.NotFound} {
		s.fail.Store(uint32(c))
		if _, err := do(); status.Code(err) != c {
			t.Fatalf("call failing with %v: %v", c, err)
		}
	}
	if got := br.State(time.Now()); got != breaker.Closed {
		t.Fatalf("after NotFound, Unavailable (not configured) and InvalidArgument the breaker is %v; want closed", got)
	}
	s.fail.Store(uint32(codes.Internal))
	do()
	do()
	if _, err := do(); !errors.Is(err, grpcclient.ErrBreakerOpen) || status.Code(err) != codes.Unavailable {
		t.Fatalf("after 2 Internal: %v; want ErrBreakerOpen", err)
	}
}

// A stream's failure counts when the stream ends with it.
func TestStreamBreakerCountsFailedStreams(t *testing.T) {
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""),
		grpc.WithStreamInterceptor(grpcclient.StreamBreaker(br, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recvAll := func() error {
		st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	if err := recvAll(); err != nil {
		t.Fatalf("healthy stream: %v", err)
	}
	s.fail.Store(uint32(codes.Unavailable))
	for i := range 2 {
		if err := recvAll(); status.Code(err) != codes.Unavailable {
			t.Fatalf("failing stream %d: %v", i, err)
		}
	}
	if _, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); !errors.Is(err, grpcclient.ErrBreakerOpen) {
		t.Fatalf("stream after 2 failures: %v; want ErrBreakerOpen", err)
	}
}

func retryInterceptor(t *testing.T, o grpcclient.RetryOptions) grpc.UnaryClientInterceptor {
	t.Helper()
	i, err := grpcclient.UnaryRetry(o)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

var fastBackoff = retry.Policy{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}

// The retry budget bounds retries when every call fails: 100 calls with
// 5 attempts each would be 500 calls without it; a 10% budget with a
// floor of 1 retry allows 11 retries.
func TestRetryBudgetBoundsRetries(t *testing.T) {
	p := fastBackoff
	p.Attempts, p.BudgetPercent, p.MinRetriesPerSecond, p.BudgetWindow = 5, 10, 0.1, 10*time.Second
	s, do := oneServer(t, grpc.WithUnaryInterceptor(retryInterceptor(t, grpcclient.RetryOptions{
		Policy: p, Idempotent: grpcclient.IdempotentMethods(unaryMethod),
	})))
	s.fail.Store(uint32(codes.Unavailable))
	for range 100 {
		if _, err := do(); status.Code(err) != codes.Unavailable {
			t.Fatalf("failing call: %v", err)
		}
	}
	// retries + 1 <= 0.1 * requests + 0.1/s * 10s at every withdrawal.
	if n := s.calls.Load(); n < 105 || n > 111 {
		t.Fatalf("100 failing calls reached the server %d times; want 100 plus 5 to 11 retries", n)
	}
}

// A retry goes to another server than the one that failed.
func TestRetryGoesToAnotherServer(t *testing.T) {
	env := startRegistry(t)
	bad, good := startServer(t, "bad"), startServer(t, "good")
	env.register(t, "orders", bad, 0)
	env.register(t, "orders", good, 0)
	p := fastBackoff
	p.Attempts = 2
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""),
		grpc.WithUnaryInterceptor(retryInterceptor(t, grpcclient.RetryOptions{Policy: p, Idempotent: grpcclient.IdempotentMethods(unaryMethod)})))
	seen := map[string]bool{}
	waitUntil(t, c, "both answer", 1, func(id string) bool { seen[id] = true; return len(seen) == 2 })
	bad.fail.Store(uint32(codes.Unavailable))
	for i := range 40 {
		if id, err := call(context.Background(), c); err != nil || id != "good" {
			t.Fatalf("call %d: %q, %v; want good (the retry of a call that hit bad)", i, id, err)
		}
	}
	if bad.calls.Load() < 10 {
		t.Fatalf("bad got %d calls; round robin should have sent it about 20 first attempts", bad.calls.Load())
	}
}

// Retries never run past the call's deadline: a retry whose backoff would
// end after it is not made, and the call returns its error at once rather
// than at the deadline. Methods not known to be idempotent are not retried.
func TestRetryHonoursTheDeadlineAndIdempotency(t *testing.T) {
	policy := func(backoff time.Duration) retry.Policy {
		return retry.Policy{Attempts: 3, BackoffBase: backoff, BackoffMax: backoff}
	}
	ceiling := func(n int64) int64 { return n - 1 } // every backoff is the ceiling
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	b := env.builder(t)
	client := func(p retry.Policy, idempotent func(string) bool) testgrpc.TestServiceClient {
		c := dial(t, b, "orders", lbConfig(balance.RoundRobinName, ""),
			grpc.WithUnaryInterceptor(retryInterceptor(t, grpcclient.WithBackoffRand(
				grpcclient.RetryOptions{Policy: p, Idempotent: idempotent}, ceiling))))
		waitUntil(t, c, "a answers", 1, func(id string) bool { return id == "a" })
		return c
	}
	idem := client(policy(300*time.Millisecond), grpcclient.IdempotentMethods(unaryMethod))
	patient := client(policy(10*time.Second), grpcclient.IdempotentMethods(unaryMethod))
	other := client(policy(300*time.Millisecond), nil)
	s.fail.Store(uint32(codes.Unavailable))

	attempts := func(c testgrpc.TestServiceClient, timeout time.Duration) (int64, error) {
		before := s.calls.Load()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return s.calls.Load() - before, err
	}
	// Time for both retries: 3 attempts.
	if n, err := attempts(idem, 10*time.Second); n != 3 || status.Code(err) != codes.Unavailable {
		t.Fatalf("with a 10s deadline and 300ms backoffs: %d attempts, %v; want 3, Unavailable", n, err)
	}
	// A deadline shorter than the backoff: no retry, and the server's own
	// error at once, not DeadlineExceeded.
	if n, err := attempts(patient, 5*time.Second); n != 1 || status.Code(err) != codes.Unavailable {
		t.Fatalf("with a 5s deadline and 10s backoffs: %d attempts, %v; want 1, Unavailable", n, err)
	}
	if n, err := attempts(other, 10*time.Second); n != 1 || status.Code(err) != codes.Unavailable {
		t.Fatalf("a method not marked idempotent: %d attempts, %v; want 1, Unavailable", n, err)
	}
}

// A token bucket in Reject mode fails calls over the limit with
// ErrRateLimited, without reaching the server.
func TestRateLimitRejects(t *testing.T) {
	s, do := oneServer(t, grpc.WithUnaryInterceptor(grpcclient.UnaryRateLimit(
		ratelimit.NewTokenBucket(ratelimit.Rate{N: 1, Per: time.Hour}, 2), grpcclient.Reject)))
	for i := range 2 {
		if _, err := do(); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	_, err := do()
	if !errors.Is(err, grpcclient.ErrRateLimited) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call over the limit: %v; want ErrRateLimited (ResourceExhausted)", err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("the server got %d calls; want 2 (the third was limited)", n)
	}
}

// In Wait mode calls are delayed to the limiter's pace, and a call whose
// turn would come after its deadline is rejected at once.
func TestRateLimitWaits(t *testing.T) {
	const interval = 40 * time.Millisecond
	for name, newLimiter := range map[string]func(per time.Duration) ratelimit.Limiter{
		"leaky bucket": func(per time.Duration) ratelimit.Limiter {
			return ratelimit.NewLeakyBucket(ratelimit.Rate{N: 1, Per: per}, 10, 0)
		},
		"token bucket": func(per time.Duration) ratelimit.Limiter {
			return ratelimit.NewTokenBucket(ratelimit.Rate{N: 1, Per: per}, 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, c := oneServerClient(t, grpc.WithUnaryInterceptor(grpcclient.UnaryRateLimit(newLimiter(interval), grpcclient.Wait)))
			start := time.Now()
			for i := range 5 {
				if _, err := call(context.Background(), c); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			// 5 calls at one per 40ms: the 5th goes at least 4 intervals
			// after the first (minus the first's head start, at most one).
			if el := time.Since(start); el < 3*interval {
				t.Fatalf("5 calls at 1 per %v took %v; want at least %v", interval, el, 3*interval)
			}
			if s.calls.Load() != 5 {
				t.Fatalf("server got %d calls; want 5", s.calls.Load())
			}
			// At one call an hour, the second call's turn comes long after
			// its deadline: it is rejected at once, without waiting for
			// the deadline (which would be DeadlineExceeded).
			_, slow := oneServerClient(t, grpc.WithUnaryInterceptor(grpcclient.UnaryRateLimit(newLimiter(time.Hour), grpcclient.Wait)))
			if _, err := call(context.Background(), slow); err != nil {
				t.Fatalf("first call at 1 per hour: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := slow.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if !errors.Is(err, grpcclient.ErrRateLimited) {
				t.Fatalf("call whose turn comes after its deadline: %v; want ErrRateLimited", err)
			}
		})
	}
}

// Stream creation goes through the limiter too.
func TestStreamRateLimitRejects(t *testing.T) {
	s, c := oneServerClient(t, grpc.WithStreamInterceptor(grpcclient.StreamRateLimit(
		ratelimit.NewTokenBucket(ratelimit.Rate{N: 1, Per: time.Hour}, 1), grpcclient.Reject)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if _, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); !errors.Is(err, grpcclient.ErrRateLimited) {
		t.Fatalf("second stream: %v; want ErrRateLimited", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("the server saw %d streams; want 1", n)
	}
}

// A server-streaming call that fails before its first message is
// answered by the stream fallback, marked degraded; so is one the open
// breaker refuses, and the fallback sees the call's request either way.
func TestStreamFallbackAnswersFailedStreams(t *testing.T) {
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	replay := grpcclient.StreamFallbackStep{Name: "replay", Func: func(ctx context.Context, _ *grpc.StreamDesc, method string, req any, cause error) (grpc.ClientStream, error) {
		if method != "/grpc.testing.TestService/StreamingOutputCall" || cause == nil {
			t.Errorf("stream fallback got method %q, cause %v", method, cause)
		}
		r, ok := req.(*testgrpc.StreamingOutputCallRequest)
		if !ok || r.GetPayload().GetBody() == nil {
			t.Errorf("stream fallback got request %v; want the call's", req)
		}
		n := 0
		return grpcclient.FallbackStream(ctx, func(m any) error {
			if n == 2 {
				return io.EOF
			}
			n++
			m.(*testgrpc.StreamingOutputCallResponse).Payload = &testgrpc.Payload{Body: []byte("cached")}
			return nil
		}), nil
	}}
	env := startRegistry(t)
	s := startServer(t, "a")
	env.register(t, "orders", s, 0)
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""),
		grpc.WithChainStreamInterceptor(grpcclient.StreamFallback(0, replay), grpcclient.StreamBreaker(br, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// recvAll returns the bodies received, the stream's degraded mark and
	// its error.
	recvAll := func() ([]string, string, error) {
		st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte("q")}})
		if err != nil {
			return nil, "", err
		}
		var bodies []string
		for {
			m, err := st.Recv()
			if err != nil {
				r, _ := grpcclient.Degraded(st.Trailer())
				if err == io.EOF {
					err = nil
				}
				return bodies, r, err
			}
			bodies = append(bodies, string(m.GetPayload().GetBody()))
		}
	}
	if bodies, r, err := recvAll(); err != nil || len(bodies) != 1 || r != "" {
		t.Fatalf("healthy stream: %q, %v, degraded %q; want one message from the server", bodies, err, r)
	}
	s.fail.Store(uint32(codes.Unavailable))
	for i := range 2 {
		bodies, r, err := recvAll()
		if err != nil || strings.Join(bodies, ",") != "cached,cached" || r != "replay: code:Unavailable" {
			t.Fatalf("failing stream %d: %q, %v, degraded %q; want the fallback's two messages, degraded \"replay: code:Unavailable\"", i, bodies, err, r)
		}
	}
	calls := s.calls.Load()
	bodies, r, err := recvAll()
	if err != nil || strings.Join(bodies, ",") != "cached,cached" || r != "replay: breaker_open" {
		t.Fatalf("stream with the breaker open: %q, %v, degraded %q; want the fallback's, \"replay: breaker_open\"", bodies, err, r)
	}
	if s.calls.Load() != calls {
		t.Fatal("the server saw a stream while the breaker was open")
	}
}

// StreamRetry retries the creation of a stream of an idempotent method
// (here: a service without instances, whose picks fail with Unavailable).
func TestStreamRetryRetriesCreation(t *testing.T) {
	env := startRegistry(t)
	b := env.builder(t)
	const method = "/grpc.testing.TestService/StreamingOutputCall"
	for _, tc := range []struct {
		name       string
		idempotent func(string) bool
		want       int
	}{
		{"idempotent", grpcclient.IdempotentMethods(method), 3},
		{"not idempotent", nil, 1},
	} {
		p := fastBackoff
		p.Attempts = 3
		sr, err := grpcclient.StreamRetry(grpcclient.RetryOptions{Policy: p, Idempotent: tc.idempotent})
		if err != nil {
			t.Fatal(err)
		}
		var attempts atomic.Int64
		count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			attempts.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}
		c := dial(t, b, "nobody", lbConfig(balance.RoundRobinName, ""), grpc.WithChainStreamInterceptor(sr, count))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		cancel()
		if status.Code(err) != codes.Unavailable || attempts.Load() != int64(tc.want) {
			t.Fatalf("%s: %v after %d attempts; want Unavailable after %d", tc.name, err, attempts.Load(), tc.want)
		}
	}
}

func TestRetryRejectsABadPolicy(t *testing.T) {
	_, err := grpcclient.UnaryRetry(grpcclient.RetryOptions{Policy: retry.Policy{Attempts: -1}})
	if err == nil || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("UnaryRetry with attempts -1: %v; want an error naming attempts", err)
	}
}

// An attempt that runs out of its per-try timeout is retried on another
// server (retry_on timeout, the default), while the call's own deadline
// is far.
func TestRetryAfterAPerTryTimeout(t *testing.T) {
	env := startRegistry(t)
	slow, fast := startServer(t, "slow"), startServer(t, "fast")
	env.register(t, "orders", slow, 0)
	env.register(t, "orders", fast, 0)
	p := fastBackoff
	p.Attempts, p.PerTryTimeout = 2, 300*time.Millisecond
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""),
		grpc.WithUnaryInterceptor(retryInterceptor(t, grpcclient.RetryOptions{Policy: p, Idempotent: grpcclient.IdempotentMethods(unaryMethod)})))
	seen := map[string]bool{}
	waitUntil(t, c, "both answer", 1, func(id string) bool { seen[id] = true; return len(seen) == 2 })
	slow.delay.Store(int64(time.Minute))
	before := slow.calls.Load()
	for i := range 6 {
		if id, err := call(context.Background(), c); err != nil || id != "fast" {
			t.Fatalf("call %d: %q, %v; want fast (the retry of an attempt that timed out on slow); slow %d fast %d calls", i, id, err, slow.calls.Load(), fast.calls.Load())
		}
	}
	if slow.calls.Load() == before {
		t.Fatal("no attempt went to slow: the test did not exercise the per-try timeout")
	}
}

// A client-streaming call's success counts when CloseAndRecv returns the
// response (the caller reads no further): 3 successes and 2 failures are
// a 40% failure rate, under the breaker's 50%; a third failure reaches it.
func TestStreamBreakerCountsClientStreamingSuccesses(t *testing.T) {
	br, err := breaker.New(breaker.Config{FailureRate: 0.5, MinRequests: 2, WindowSize: 20, OpenFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, c := oneServerClient(t, grpc.WithStreamInterceptor(grpcclient.StreamBreaker(br, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	upload := func() error {
		st, err := c.StreamingInputCall(ctx)
		if err != nil {
			return err
		}
		// io.EOF: the server ended the stream; CloseAndRecv says how.
		if err := st.Send(&testgrpc.StreamingInputCallRequest{}); err != nil && err != io.EOF {
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	}
	for i := range 3 {
		if err := upload(); err != nil {
			t.Fatalf("healthy upload %d: %v", i, err)
		}
	}
	s.fail.Store(uint32(codes.Unavailable))
	for i := range 2 {
		if err := upload(); status.Code(err) != codes.Unavailable {
			t.Fatalf("failing upload %d: %v; want Unavailable", i, err)
		}
	}
	if st := br.State(time.Now()); st != breaker.Closed {
		t.Fatalf("after 3 successful and 2 failed client-streaming calls (40%% failures) the breaker is %v; want closed under a 50%% failure rate (are the successes counted?)", st)
	}
	if err := upload(); status.Code(err) != codes.Unavailable {
		t.Fatalf("third failing upload: %v; want Unavailable", err)
	}
	if st := br.State(time.Now()); st != breaker.Open {
		t.Fatalf("after 3 successful and 3 failed uploads (50%% failures) the breaker is %v; want open", st)
	}
}

// A stream the caller abandons (it cancels the context without reading
// the stream to its end) counts neither way: it gives back the half-open
// breaker's probe slot, and the next stream is admitted as a probe.
func TestStreamBreakerFreesTheProbeOfAnAbandonedStream(t *testing.T) {
	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Millisecond, HalfOpenProbes: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, c := oneServerClient(t, grpc.WithStreamInterceptor(grpcclient.StreamBreaker(br, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &testgrpc.StreamingOutputCallRequest{}
	recvAll := func(st testgrpc.TestService_StreamingOutputCallClient) error {
		for {
			if _, err := st.Recv(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	s.fail.Store(uint32(codes.Unavailable))
	st, err := c.StreamingOutputCall(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := recvAll(st); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing stream: %v; want Unavailable", err)
	}
	s.fail.Store(0)
	testutil.WaitFor(t, 10*time.Second, "the breaker to turn half-open", func() bool { return br.State(time.Now()) == breaker.HalfOpen })

	pctx, pcancel := context.WithCancel(ctx)
	if _, err := c.StreamingOutputCall(pctx, req); err != nil {
		t.Fatalf("the probe stream: %v", err)
	}
	if _, err := c.StreamingOutputCall(ctx, req); !errors.Is(err, grpcclient.ErrBreakerOpen) {
		t.Fatalf("a second stream while the only probe is out: %v; want ErrBreakerOpen", err)
	}
	pcancel() // abandoned, never read
	testutil.WaitFor(t, 10*time.Second, "a stream admitted after the probe was abandoned", func() bool {
		st, err := c.StreamingOutputCall(ctx, req)
		if errors.Is(err, grpcclient.ErrBreakerOpen) {
			return false
		}
		if err == nil {
			err = recvAll(st)
		}
		if err != nil {
			t.Fatalf("the stream admitted after the abandoned probe: %v", err)
		}
		return true
	})
	if st := br.State(time.Now()); st != breaker.Closed {
		t.Fatalf("after the abandoned probe and a successful one the breaker is %v; want closed", st)
	}
}

// echoStream is a bidirectional fallback stream: RecvMsg answers each
// message SendMsg gave it with the same payload, and io.EOF after
// CloseSend. Its first RecvMsg closes waiting.
type echoStream struct {
	ctx     context.Context
	in      chan *testgrpc.StreamingOutputCallRequest
	waiting chan struct{}
	once    sync.Once
}

func (e *echoStream) Header() (metadata.MD, error) {
	return metadata.Pairs("x-answered-by", "echo"), nil
}
func (e *echoStream) Trailer() metadata.MD     { return metadata.MD{} }
func (e *echoStream) Context() context.Context { return e.ctx }
func (e *echoStream) CloseSend() error         { close(e.in); return nil }
func (e *echoStream) SendMsg(m any) error {
	e.in <- m.(*testgrpc.StreamingOutputCallRequest)
	return nil
}

func (e *echoStream) RecvMsg(m any) error {
	e.once.Do(func() { close(e.waiting) })
	select {
	case r, ok := <-e.in:
		if !ok {
			return io.EOF
		}
		m.(*testgrpc.StreamingOutputCallResponse).Payload = r.GetPayload()
		return nil
	case <-e.ctx.Done():
		return status.FromContextError(e.ctx.Err()).Err()
	}
}

// Once a fallback has taken over a bidirectional stream, the stream is
// the fallback's: SendMsg, Header and CloseSend go to it, and they are
// not held up while its RecvMsg waits for a message (which SendMsg
// gives it).
func TestStreamFallbackTakesOverABidiStreamWithoutBlockingIt(t *testing.T) {
	echo := &echoStream{in: make(chan *testgrpc.StreamingOutputCallRequest, 4), waiting: make(chan struct{})}
	step := grpcclient.StreamFallbackStep{Name: "echo", Func: func(ctx context.Context, _ *grpc.StreamDesc, _ string, _ any, _ error) (grpc.ClientStream, error) {
		echo.ctx = ctx
		return echo, nil
	}}
	s, c := oneServerClient(t, grpc.WithStreamInterceptor(grpcclient.StreamFallback(0, step)))
	s.fail.Store(uint32(codes.Unavailable))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type recv struct {
		body string
		err  error
	}
	got := make(chan recv, 1)
	go func() {
		m, err := st.Recv()
		got <- recv{string(m.GetPayload().GetBody()), err}
	}()
	select {
	case <-echo.waiting:
	case r := <-got:
		t.Fatalf("Recv returned %q, %v before the fallback's stream waited for a message", r.body, r.err)
	case <-ctx.Done():
		t.Fatal("the fallback never took over the failed stream")
	}
	// RecvMsg is waiting inside the fallback's stream now.
	sent := make(chan error, 1)
	go func() {
		if err := st.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte("ping")}}); err != nil {
			sent <- err
			return
		}
		md, err := st.Header()
		if err == nil && (md.Get("x-answered-by") == nil || md.Get(grpcclient.MetadataDegraded) == nil) {
			err = errors.New("header " + fmt.Sprint(md) + " lacks the fallback's x-answered-by or the degraded mark")
		}
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("Send and Header while Recv waits in the fallback: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send and Header blocked for 5s while Recv waited in the fallback's stream")
	}
	select {
	case r := <-got:
		if r.err != nil || r.body != "ping" {
			t.Fatalf("Recv: %q, %v; want the fallback's echo of ping", r.body, r.err)
		}
	case <-ctx.Done():
		t.Fatal("the message sent after the takeover never reached the fallback's stream")
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend: %v; want io.EOF (CloseSend reaching the fallback's stream)", err)
	}
	if r, _ := grpcclient.Degraded(st.Trailer()); r != "echo: code:Unavailable" {
		t.Fatalf("trailer degraded %q; want \"echo: code:Unavailable\"", r)
	}
}

// A DeadlineExceeded that the server answers at once (its own downstream
// call timed out) is its answer, not this attempt's per-try timeout: it
// is not retried under retry_on timeout, as DeadlineExceeded is not in
// Codes. (An attempt that does run out of its per-try timeout is:
// TestRetryAfterAPerTryTimeout.)
func TestRetryTellsAServersDeadlineExceededFromAPerTryTimeout(t *testing.T) {
	p := fastBackoff
	p.Attempts, p.PerTryTimeout = 2, 5*time.Second
	s, do := oneServer(t, grpc.WithUnaryInterceptor(retryInterceptor(t, grpcclient.RetryOptions{
		Policy: p, Idempotent: grpcclient.IdempotentMethods(unaryMethod),
	})))
	s.fail.Store(uint32(codes.DeadlineExceeded))
	before := s.calls.Load()
	if _, err := do(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call the server answers DeadlineExceeded: %v", err)
	}
	if n := s.calls.Load() - before; n != 1 {
		t.Fatalf("the server's own DeadlineExceeded was tried %d times; want 1 (no per-try timeout passed)", n)
	}
}
