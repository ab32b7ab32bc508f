package pipeline_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// fakeTransport answers each attempt with what its endpoint's func says.
// A fake is fine here: these are unit tests of the attempt loop.
type fakeTransport map[string]func(ctx context.Context) (*http.Response, error)

func (f fakeTransport) RoundTrip(ctx context.Context, _ time.Time, ep *endpoint.Endpoint, _ *pipeline.Call, _ io.Reader) (*http.Response, error) {
	return f[ep.Address()](ctx)
}

func answer(status int) func(context.Context) (*http.Response, error) {
	return func(context.Context) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), ContentLength: 0}, nil
	}
}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

func refuse(context.Context) (*http.Response, error) { return nil, errRefused }

func newUpstream(t testing.TB, cfg upstream.Config, addrs ...string) *upstream.Upstream {
	t.Helper()
	for _, a := range addrs {
		cfg.Targets = append(cfg.Targets, endpoint.Spec{Address: a})
	}
	u, err := upstream.New("app", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

func newRoute(t testing.TB, cfg pipeline.Config, u *upstream.Upstream, tr pipeline.Transport) *pipeline.Route {
	t.Helper()
	r, err := pipeline.New("r", cfg, u, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// do runs one GET through r and finishes it; it returns the status and
// the error code ("" on a response).
func do(t *testing.T, r *pipeline.Route) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://app/", nil)
	c := &pipeline.Call{Req: req}
	resp, err := r.Do(c, time.Now())
	if err != nil {
		var pe *pipeline.Error
		if !errors.As(err, &pe) {
			t.Fatalf("Do returned %T %v, want a *pipeline.Error", err, err)
		}
		c.Finish(pe.Status, nil)
		return pe.Status, pe.Code
	}
	resp.Body.Close()
	c.Finish(resp.StatusCode, nil)
	return resp.StatusCode, ""
}

func TestWithoutAPolicyAFailedConnectIsRetriedOnAnotherEndpoint(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "dead:1", "live:1")
	r := newRoute(t, pipeline.Config{}, u, fakeTransport{"dead:1": refuse, "live:1": answer(200)})
	for i := 0; i < 4; i++ {
		if st, code := do(t, r); st != 200 {
			t.Fatalf("request %d: %d %s, want 200 after one retry", i, st, code)
		}
	}
}

func TestWithoutAPolicyASingleEndpointIsNotRetried(t *testing.T) {
	calls := 0
	u := newUpstream(t, upstream.Config{}, "dead:1")
	r := newRoute(t, pipeline.Config{}, u, fakeTransport{"dead:1": func(ctx context.Context) (*http.Response, error) {
		calls++
		return refuse(ctx)
	}})
	if st, code := do(t, r); st != 502 || code != pipeline.CodeConnectFailed {
		t.Fatalf("got %d %s, want 502 %s", st, code, pipeline.CodeConnectFailed)
	}
	if calls != 1 {
		t.Fatalf("%d attempts on the only endpoint, want 1", calls)
	}
}

func TestLimitsAnswerWithTheirCodes(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	r := newRoute(t, pipeline.Config{
		RateLimit:   []pipeline.RateLimit{{Name: "one", Config: ratelimit.Config{Rate: "1/m", Burst: 1}}},
		Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1},
	}, u, fakeTransport{"a:1": func(ctx context.Context) (*http.Response, error) {
		entered <- struct{}{}
		<-block
		return answer(200)(ctx)
	}})
	done := make(chan int)
	go func() {
		st, _ := do(t, r)
		done <- st
	}()
	<-entered
	if st, code := do(t, r); st != 429 || code != pipeline.CodeRateLimited {
		t.Fatalf("second request: %d %s, want 429 %s", st, code, pipeline.CodeRateLimited)
	}
	close(block)
	if st := <-done; st != 200 {
		t.Fatalf("first request: %d", st)
	}

	r2 := newRoute(t, pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1}}, u, fakeTransport{"a:1": func(ctx context.Context) (*http.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://app/", nil)
	held := &pipeline.Call{Req: req}
	go func() {
		_, err := r2.Do(held, time.Now())
		var pe *pipeline.Error
		errors.As(err, &pe)
		held.Finish(pe.Status, nil)
		done <- pe.Status
	}()
	<-entered
	if st, code := do(t, r2); st != 503 || code != pipeline.CodeConcurrencyLimited {
		t.Fatalf("while the one slot is held: %d %s, want 503 %s", st, code, pipeline.CodeConcurrencyLimited)
	}
	cancel()
	if st := <-done; st != pipeline.StatusClientClosed {
		t.Fatalf("the held call, its caller gone: %d, want %d", st, pipeline.StatusClientClosed)
	}
}

// TestHedgeReportsTheFirstAttemptWhenItFailsAndTheHedgeWins: the first
// attempt is still running when the hedge goes out, then fails; the hedge
// answers. The failed attempt must be reported to its endpoint (a hedge
// used to drop it, leaving the endpoint's in-flight count one too high for
// good and its failure unseen by passive health).
func TestHedgeReportsTheFirstAttemptWhenItFailsAndTheHedgeWins(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "slow:1", "fast:1")
	hedged := make(chan struct{})
	firstFailed := make(chan struct{})
	var once sync.Once
	r := newRoute(t, pipeline.Config{Retry: &retry.Policy{HedgeAfter: "5ms"}}, u, fakeTransport{
		"slow:1": func(ctx context.Context) (*http.Response, error) {
			<-hedged
			defer close(firstFailed)
			return nil, errors.New("connection reset by peer")
		},
		"fast:1": func(ctx context.Context) (*http.Response, error) {
			once.Do(func() { close(hedged) })
			<-firstFailed
			return answer(200)(ctx)
		},
	})
	if st, code := do(t, r); st != 200 {
		t.Fatalf("hedged request: %d %s, want the hedge's 200", st, code)
	}
	slow := u.Pool().Snapshot().All[0]
	testutil.WaitFor(t, time.Second, "the failed first attempt to be reported", func() bool { return slow.InFlight() == 0 })
	if n := slow.Failures(); n != 1 {
		t.Fatalf("the slow endpoint has %d failures, want its reset counted once", n)
	}
}

// TestWithoutAPolicyAConnectTimeoutIsRetriedAsAConnectFailure: net's dial
// timeout error also says it is context.DeadlineExceeded; it must still
// count as a failed connect (retried on another endpoint, answered 502
// upstream_connect_failed), not as the upstream's slow answer.
func TestWithoutAPolicyAConnectTimeoutIsRetriedAsAConnectFailure(t *testing.T) {
	_, dialTimeout := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	if dialTimeout == nil {
		t.Fatal("want a dial timeout")
	}
	timeout := func(context.Context) (*http.Response, error) { return nil, dialTimeout }
	u := newUpstream(t, upstream.Config{}, "blackholed:1", "live:1")
	r := newRoute(t, pipeline.Config{}, u, fakeTransport{"blackholed:1": timeout, "live:1": answer(200)})
	for i := 0; i < 4; i++ {
		if st, code := do(t, r); st != 200 {
			t.Fatalf("request %d: %d %s, want 200 after a retry on the live endpoint", i, st, code)
		}
	}
	alone := newUpstream(t, upstream.Config{}, "blackholed:1")
	r = newRoute(t, pipeline.Config{}, alone, fakeTransport{"blackholed:1": timeout})
	if st, code := do(t, r); st != 502 || code != pipeline.CodeConnectFailed {
		t.Fatalf("the only endpoint timing out on connect: %d %s, want 502 %s", st, code, pipeline.CodeConnectFailed)
	}
}

type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("client went silent") }

// TestHTTPTransportBlamesTheCallerForItsBody: a body the caller cannot
// deliver is the caller's fault (400 bad_request), not the endpoint's.
func TestHTTPTransportBlamesTheCallerForItsBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	u := newUpstream(t, upstream.Config{}, srv.Listener.Addr().String())
	r := newRoute(t, pipeline.Config{}, u, pipeline.HTTPTransport{})
	req, _ := http.NewRequest("PUT", "http://app/x", nil)
	req.ContentLength = -1
	c := &pipeline.Call{Req: req, Body: failingBody{}}
	_, err := r.Do(c, time.Now())
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != pipeline.CodeBadRequest {
		t.Fatalf("Do = %v, want a %s error", err, pipeline.CodeBadRequest)
	}
	c.Finish(pe.Status, nil)
	if ep := u.Pool().Snapshot().All[0]; ep.Failures() != 0 {
		t.Fatalf("the endpoint was charged %d failures for the caller's body", ep.Failures())
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHTTPTransportRefusesAStatusBelow100(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	tr := pipeline.HTTPTransport{RoundTripper: rtFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 42, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	})}
	r := newRoute(t, pipeline.Config{}, u, tr)
	if st, code := do(t, r); st != 502 || code != pipeline.CodeUpstreamError {
		t.Fatalf("an endpoint answering status 42: %d %s, want 502 %s", st, code, pipeline.CodeUpstreamError)
	}
}

// atRecorder is an endpoint observer that keeps the At of every outcome.
type atRecorder struct {
	mu sync.Mutex
	at []int64
}

func (r *atRecorder) Observe(_ *endpoint.Endpoint, o endpoint.Outcome) {
	r.mu.Lock()
	r.at = append(r.at, o.At)
	r.mu.Unlock()
}

// Finish reports the endpoint's outcome with the clock reading it took
// anyway (Outcome.At), so that latency-aware policies and the endpoint's
// breaker need no reading of their own.
func TestFinishHandsTheOutcomeItsClockReading(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	rec := &atRecorder{}
	u.Pool().Snapshot().All[0].SetObserver(rec)
	r := newRoute(t, pipeline.Config{}, u, fakeTransport{"a:1": answer(200)})
	before := endpoint.Nanotime()
	if code, _ := do(t, r); code != 200 {
		t.Fatalf("status %d, want 200", code)
	}
	after := endpoint.Nanotime()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.at) != 1 || rec.at[0] < before || rec.at[0] > after {
		t.Fatalf("the endpoint heard outcomes with At %v; want one, within [%d, %d] (the call's span)", rec.at, before, after)
	}
}

// Breaker reports the route breaker's state and its last changes, and a
// replacing route with the same breaker settings keeps both.
func TestBreakerReportsItsStateAndRecentChanges(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "10.0.0.1:80")
	cfg := pipeline.Config{Breaker: &breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Minute}}
	r := newRoute(t, cfg, u, fakeTransport{"10.0.0.1:80": answer(503)})
	if _, _, ok := newRoute(t, pipeline.Config{}, u, fakeTransport{}).Breaker(time.Now()); ok {
		t.Fatal("a route without a breaker reports one")
	}
	state, recent, ok := r.Breaker(time.Now())
	if !ok || state != "closed" || len(recent) != 0 {
		t.Fatalf("new breaker: %q %v %v", state, recent, ok)
	}
	for i := 0; i < 2; i++ {
		do(t, r)
	}
	state, recent, _ = r.Breaker(time.Now())
	if state != "open" || len(recent) != 1 || recent[0].From != "closed" || recent[0].To != "open" || recent[0].Reason == "" || recent[0].At.IsZero() {
		t.Fatalf("after two failures: %q %+v, want open after one closed->open change with its reason", state, recent)
	}
	next, err := pipeline.New("r", cfg, u, fakeTransport{}, pipeline.Replacing(r))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if state, recent, _ := next.Breaker(time.Now()); state != "open" || len(recent) != 1 {
		t.Fatalf("the replacing route: %q %+v, want the same open breaker and its history", state, recent)
	}
}
