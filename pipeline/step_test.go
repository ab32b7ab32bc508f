package pipeline_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	rlredis "github.com/switchboard-dev/switchboard/ratelimit/redis"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// These tests drive calls step by step, as an event loop does: the test
// is the front end, carrying out each step itself (no Transport is
// called for a StepSend).

// noTransport fails the test if the pipeline sends through the route's
// Transport: a step-driven call sends its StepSend attempts itself.
type noTransport struct{ t *testing.T }

func (n noTransport) RoundTrip(context.Context, time.Time, *endpoint.Endpoint, *pipeline.Call, io.Reader) (*http.Response, error) {
	n.t.Error("the route's Transport was called for a step-driven call's attempt")
	return nil, errors.New("unexpected")
}

// closeRecorder is a response body that counts its Close calls.
type closeRecorder struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeRecorder) Close() error { c.closed.Add(1); return nil }

func response(status int) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: &closeRecorder{Reader: strings.NewReader("")}}
}

func newCall(ctx context.Context) *pipeline.Call {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://app/", nil)
	return &pipeline.Call{Req: req}
}

// want fails the test unless s, a step of c, is k.
func want(t *testing.T, c *pipeline.Call, s, k pipeline.Step, what string) {
	t.Helper()
	if s != k {
		_, err := c.Result()
		t.Fatalf("%s: step %v (error %v), want %v", what, s, err, k)
	}
}

// wantError fails the test unless s ends c with an *Error of the given
// status and code.
func wantError(t *testing.T, c *pipeline.Call, s pipeline.Step, status int, code, what string) {
	t.Helper()
	want(t, c, s, pipeline.StepDone, what)
	resp, err := c.Result()
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != status || pe.Code != code {
		t.Fatalf("%s: ended with %v (response %v), want %d %s", what, err, resp, status, code)
	}
}

// wantResponse fails the test unless s ends c with a response of the
// given status, degraded (answered by a fallback step) or not.
func wantResponse(t *testing.T, c *pipeline.Call, s pipeline.Step, status int, degraded bool, what string) *http.Response {
	t.Helper()
	want(t, c, s, pipeline.StepDone, what)
	resp, err := c.Result()
	if err != nil || resp == nil || resp.StatusCode != status || c.Degraded() != degraded {
		t.Fatalf("%s: ended with %v, %v (degraded %v), want %d (degraded %v)", what, resp, err, c.Degraded(), status, degraded)
	}
	return resp
}

func TestBeginSendsTheFirstAttemptAndAnsweredEndsTheCall(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	r := newRoute(t, pipeline.Config{Timeout: 5 * time.Second}, u, noTransport{t})
	c := newCall(context.Background())
	now := time.Now()
	want(t, c, r.Begin(c, now), pipeline.StepSend, "Begin")
	ep, deadline, body := c.Attempt()
	if ep.Address() != "a:1" || !deadline.Equal(now.Add(5*time.Second)) || body != nil {
		t.Fatalf("Begin sends to %s by %v with body %v; want a:1 by the route's deadline %v, no body", ep.Address(), deadline, body, now.Add(5*time.Second))
	}
	if n := ep.InFlight(); n != 1 {
		t.Fatalf("the endpoint counts %d in flight while the attempt is out, want 1", n)
	}
	sent := response(200)
	want(t, c, c.Answered(sent, nil, now.Add(time.Millisecond)), pipeline.StepDone, "Answered")
	if resp, err := c.Result(); resp != sent || err != nil {
		t.Fatalf("Answered ended with %v, %v; want the attempt's response", resp, err)
	}
	c.Finish(200, nil)
	if ep := c.Endpoint(); ep == nil || ep.Address() != "a:1" || ep.InFlight() != 0 {
		t.Fatalf("after Finish the call's endpoint is %v; want a:1 with nothing in flight", ep)
	}

	// The per-try timeout comes before the route's.
	r = newRoute(t, pipeline.Config{Timeout: 5 * time.Second, Retry: &retry.Policy{PerTryTimeout: time.Second}}, u, noTransport{t})
	c = newCall(context.Background())
	want(t, c, r.Begin(c, now), pipeline.StepSend, "Begin with a per-try timeout")
	if _, deadline, _ := c.Attempt(); !deadline.Equal(now.Add(time.Second)) {
		t.Fatalf("the attempt's deadline is %v, want the per-try timeout's %v", deadline, now.Add(time.Second))
	}
	c.Answered(nil, errRefused, now)
	c.Finish(502, nil)
}

func TestWithoutAPolicyAFailedConnectIsAnotherSendStep(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1", "b:1")
	r := newRoute(t, pipeline.Config{}, u, noTransport{t})
	c := newCall(context.Background())
	now := time.Now()
	want(t, c, r.Begin(c, now), pipeline.StepSend, "Begin")
	first, _, _ := c.Attempt()
	want(t, c, c.Answered(nil, errRefused, now), pipeline.StepSend, "after a failed connect")
	if ep, _, _ := c.Attempt(); ep == first {
		t.Fatalf("the retry goes to %s again, want the other endpoint", first.Address())
	}
	wantResponse(t, c, c.Answered(response(200), nil, now), 200, false, "the retry answered")
	c.Finish(200, nil)
	if first.Failures() != 1 || first.InFlight() != 0 {
		t.Fatalf("the refusing endpoint has %d failures and %d in flight, want 1 and 0", first.Failures(), first.InFlight())
	}
}

func TestARetryBackoffIsAWait(t *testing.T) {
	pol := &retry.Policy{Attempts: 2, BackoffBase: 10 * time.Second, BackoffMax: 10 * time.Second}
	u := newUpstream(t, upstream.Config{}, "a:1", "b:1")
	r := newRoute(t, pipeline.Config{Retry: pol}, u, noTransport{t})

	c := newCall(context.Background())
	now := time.Now()
	r.Begin(c, now)
	first, _, _ := c.Attempt()
	want(t, c, c.Answered(nil, errRefused, now), pipeline.StepWait, "after a failed connect, under a policy")
	until := c.WaitUntil()
	if !until.After(now) || until.After(now.Add(10*time.Second)) {
		t.Fatalf("the backoff ends %v after the failure, want within (0, 10s]: full jitter under backoff_base", until.Sub(now))
	}
	want(t, c, c.Resume(until), pipeline.StepSend, "Resume after the backoff")
	if ep, _, _ := c.Attempt(); ep == first {
		t.Fatalf("the retry goes to %s again, want the other endpoint", first.Address())
	}
	wantResponse(t, c, c.Answered(response(200), nil, until), 200, false, "the retry answered")
	c.Finish(200, nil)

	// A status the policy retries: the response is dropped (closed) and
	// the retry waits its backoff too.
	c = newCall(context.Background())
	r.Begin(c, now)
	unavailable := response(503)
	want(t, c, c.Answered(unavailable, nil, now), pipeline.StepWait, "after a 503, under a policy")
	if n := unavailable.Body.(*closeRecorder).closed.Load(); n != 1 {
		t.Fatalf("the dropped 503's body was closed %d times, want 1", n)
	}
	want(t, c, c.Resume(c.WaitUntil()), pipeline.StepSend, "Resume after the status's backoff")
	wantResponse(t, c, c.Answered(response(200), nil, now), 200, false, "the retry answered")
	c.Finish(200, nil)

	// The caller goes away during the backoff: Resume ends the call.
	ctx, cancel := context.WithCancel(context.Background())
	c = newCall(ctx)
	r.Begin(c, now)
	want(t, c, c.Answered(nil, errRefused, now), pipeline.StepWait, "after a failed connect")
	cancel()
	wantError(t, c, c.Resume(now), pipeline.StatusClientClosed, pipeline.CodeClientClosed, "Resume after the caller left")
	c.Finish(pipeline.StatusClientClosed, nil)

	// A backoff that would end past the route's deadline is not waited.
	r = newRoute(t, pipeline.Config{Timeout: time.Nanosecond, Retry: pol}, u, noTransport{t})
	c = newCall(context.Background())
	r.Begin(c, now)
	wantError(t, c, c.Answered(nil, errRefused, now), 502, pipeline.CodeConnectFailed, "a failed connect with no time for the backoff")
	c.Finish(502, nil)
	c = newCall(context.Background())
	r.Begin(c, now)
	wantError(t, c, c.Answered(response(503), nil, now), 504, pipeline.CodeUpstreamTimeout, "a 503 with no time for the backoff")
	c.Finish(504, nil)
}

func TestALeakyBucketDelayIsAWait(t *testing.T) {
	leaky := []pipeline.RateLimit{{Name: "leaky", Config: ratelimit.Config{Algorithm: "leaky_bucket", Rate: "1/s", Queue: 1}}}
	u := newUpstream(t, upstream.Config{}, "a:1")
	r := newRoute(t, pipeline.Config{RateLimit: leaky}, u, noTransport{t})
	now := time.Now()

	first := newCall(context.Background())
	want(t, first, r.Begin(first, now), pipeline.StepSend, "the first request")
	second := newCall(context.Background())
	want(t, second, r.Begin(second, now), pipeline.StepWait, "the second request in the same instant")
	if until := second.WaitUntil(); !until.Equal(now.Add(time.Second)) {
		t.Fatalf("the second request waits %v, want one interval, %v", until.Sub(now), time.Second)
	}
	third := newCall(context.Background())
	wantError(t, third, r.Begin(third, now), 429, pipeline.CodeRateLimited, "the third request, the queue full")
	third.Finish(429, nil)
	want(t, second, second.Resume(second.WaitUntil()), pipeline.StepSend, "Resume after the delay")
	for _, c := range []*pipeline.Call{first, second} {
		wantResponse(t, c, c.Answered(response(200), nil, now), 200, false, "an answer")
		c.Finish(200, nil)
	}

	// The caller goes away during the delay.
	r = newRoute(t, pipeline.Config{RateLimit: leaky}, u, noTransport{t})
	first = newCall(context.Background())
	r.Begin(first, now)
	ctx, cancel := context.WithCancel(context.Background())
	second = newCall(ctx)
	want(t, second, r.Begin(second, now), pipeline.StepWait, "the second request")
	cancel()
	wantError(t, second, second.Resume(now), pipeline.StatusClientClosed, pipeline.CodeClientClosed, "Resume after the caller left")
	second.Finish(pipeline.StatusClientClosed, nil)
	first.Answered(response(200), nil, now)
	first.Finish(200, nil)
}

func TestAnOpenBreakerEndsTheCallWithoutASend(t *testing.T) {
	brk := &breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Minute}
	static := &fallback.Config{Steps: []fallback.StepConfig{{Type: fallback.StepStatic, Status: 200, Body: "later"}}}
	for _, tc := range []struct {
		name     string
		fallback *fallback.Config
	}{{"no fallback", nil}, {"static fallback", static}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, upstream.Config{}, "a:1")
			r := newRoute(t, pipeline.Config{Breaker: brk, Fallback: tc.fallback}, u, noTransport{t})
			c := newCall(context.Background())
			now := time.Now()
			want(t, c, r.Begin(c, now), pipeline.StepSend, "Begin")
			wantResponse(t, c, c.Answered(response(500), nil, now), 500, false, "a 500")
			c.Finish(500, nil) // opens the breaker

			c = newCall(context.Background())
			if tc.fallback == nil {
				wantError(t, c, r.Begin(c, now), 503, pipeline.CodeBreakerOpen, "Begin while the breaker is open")
			} else {
				wantResponse(t, c, r.Begin(c, now), 200, true, "Begin while the breaker is open")
			}
			c.Finish(200, nil)
		})
	}
}

func TestFallbackStepsRunInlineOrAsABlockingStep(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	now := time.Now()

	// A static step answers at once.
	static := &fallback.Config{Steps: []fallback.StepConfig{{Type: fallback.StepStatic, Status: 200, Body: "later"}}}
	r := newRoute(t, pipeline.Config{Fallback: static}, u, noTransport{t})
	c := newCall(context.Background())
	r.Begin(c, now)
	wantResponse(t, c, c.Answered(nil, errRefused, now), 200, true, "the only endpoint refusing, a static fallback")
	c.Finish(200, nil)

	// A backup step sends to another upstream: that blocks.
	backup := newUpstream(t, upstream.Config{}, "spare:1")
	sent := 0
	backups := func(name string) (*upstream.Upstream, pipeline.Transport, bool) {
		return backup, fakeTransport{"spare:1": func(ctx context.Context) (*http.Response, error) {
			sent++
			return answer(200)(ctx)
		}}, name == "spare"
	}
	chain := &fallback.Config{Steps: []fallback.StepConfig{{Type: fallback.StepBackup, Upstream: "spare"}}}
	r2, err := pipeline.New("r2", pipeline.Config{Fallback: chain}, u, noTransport{t}, pipeline.WithBackups(backups))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Close)
	c = newCall(context.Background())
	r2.Begin(c, now)
	want(t, c, c.Answered(nil, errRefused, now), pipeline.StepBlock, "the only endpoint refusing, a backup fallback")
	if sent != 0 {
		t.Fatal("the backup was called before Block")
	}
	resp := wantResponse(t, c, c.Block(), 200, true, "Block")
	if sent != 1 {
		t.Fatalf("Block sent %d requests to the backup, want 1", sent)
	}
	resp.Body.Close()
	c.Finish(200, nil)
}

func TestAConcurrencyQueueIsABlockingStep(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	now := time.Now()

	// Without a queue, a full limit refuses at once.
	r := newRoute(t, pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1}}, u, noTransport{t})
	holder := newCall(context.Background())
	want(t, holder, r.Begin(holder, now), pipeline.StepSend, "the first call")
	c := newCall(context.Background())
	wantError(t, c, r.Begin(c, now), 503, pipeline.CodeConcurrencyLimited, "a second call, no queue")
	c.Finish(503, nil)
	holder.Answered(response(200), nil, now)
	holder.Finish(200, nil)

	// With one, waiting in it is a blocking step.
	r = newRoute(t, pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1, Queue: 1}}, u, noTransport{t})
	holder = newCall(context.Background())
	want(t, holder, r.Begin(holder, now), pipeline.StepSend, "the first call")
	c = newCall(context.Background())
	want(t, c, r.Begin(c, now), pipeline.StepBlock, "a second call, with a queue")
	got := make(chan pipeline.Step, 1)
	go func() { got <- c.Block() }()
	select {
	case s := <-got:
		t.Fatalf("Block returned %v while the slot is held", s)
	default:
	}
	holder.Answered(response(200), nil, now)
	holder.Finish(200, nil)
	select {
	case s := <-got:
		want(t, c, s, pipeline.StepSend, "Block once the slot was given back")
	case <-time.After(10 * time.Second):
		t.Fatal("Block did not return after the slot was given back")
	}
	c.Answered(response(200), nil, now)
	c.Finish(200, nil)
}

func TestAHedgedAttemptIsABlockingStep(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1", "b:1")
	r := newRoute(t, pipeline.Config{Retry: &retry.Policy{HedgeAfter: "1h"}}, u, fakeTransport{"a:1": answer(200), "b:1": answer(200)})
	c := newCall(context.Background())
	want(t, c, r.Begin(c, time.Now()), pipeline.StepBlock, "a hedged first attempt")
	wantResponse(t, c, c.Block(), 200, false, "Block, the first attempt answering at once")
	c.Finish(200, nil)
}

func TestAGlobalRateLimitIsABlockingStep(t *testing.T) {
	global := []pipeline.RateLimit{{Name: "global", Config: ratelimit.Config{Rate: "10/s", Burst: 10},
		Global: &pipeline.GlobalLimit{Redis: testutil.DeadAddr(t), Config: rlredis.Config{OnFailure: rlredis.FailClosed}}}}
	u := newUpstream(t, upstream.Config{}, "a:1")
	r := newRoute(t, pipeline.Config{RateLimit: global}, u, noTransport{t})
	c := newCall(context.Background())
	want(t, c, r.Begin(c, time.Now()), pipeline.StepBlock, "Begin with a global limit")
	wantError(t, c, c.Block(), 429, pipeline.CodeRateLimited, "Block, Redis down and the limit failing closed")
	c.Finish(429, nil)
}

func TestStepsOutOfTurnPanic(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	r := newRoute(t, pipeline.Config{}, u, noTransport{t})
	c := newCall(context.Background())
	r.Begin(c, time.Now())
	c.Answered(response(200), nil, time.Now())
	c.Finish(200, nil)
	for name, f := range map[string]func(){
		"Answered": func() { c.Answered(response(200), nil, time.Now()) },
		"Resume":   func() { c.Resume(time.Now()) },
		"Block":    func() { c.Block() },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s after the call ended did not panic", name)
				}
			}()
			f()
		}()
	}
}

// A status that triggers the fallback chain: the upstream's answer is held
// while the chain runs; it gives way to the chain's (closed, reported to
// its endpoint), or is relayed after all when no step serves.
func TestAStatusTriggerHoldsTheUpstreamAnswerWhileTheChainRuns(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	now := time.Now()
	static := &fallback.Config{On: []string{"status:503"}, Steps: []fallback.StepConfig{{Type: fallback.StepStatic, Status: 200, Body: "later"}}}
	r := newRoute(t, pipeline.Config{Fallback: static}, u, noTransport{t})
	c := newCall(context.Background())
	r.Begin(c, now)
	ep, _, _ := c.Attempt()
	unavailable := response(503)
	wantResponse(t, c, c.Answered(unavailable, nil, now), 200, true, "a 503 with a static step for it")
	if n := unavailable.Body.(*closeRecorder).closed.Load(); n != 1 || ep.InFlight() != 0 {
		t.Fatalf("the upstream's 503 was closed %d times and its endpoint has %d in flight; want 1 and 0 (reported before Finish)", n, ep.InFlight())
	}
	c.Finish(200, nil)

	// The only step, a backup, answers 503 as well: the chain fails and
	// the upstream's own 503 is the answer.
	backup := newUpstream(t, upstream.Config{}, "spare:1")
	backups := func(string) (*upstream.Upstream, pipeline.Transport, bool) {
		return backup, fakeTransport{"spare:1": answer(503)}, true
	}
	chain := &fallback.Config{On: []string{"status:503"}, Steps: []fallback.StepConfig{{Type: fallback.StepBackup, Upstream: "spare"}}}
	r2, err := pipeline.New("r2", pipeline.Config{Fallback: chain}, u, noTransport{t}, pipeline.WithBackups(backups))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Close)
	c = newCall(context.Background())
	r2.Begin(c, now)
	unavailable = response(503)
	want(t, c, c.Answered(unavailable, nil, now), pipeline.StepBlock, "a 503 with a backup step for it")
	if resp := wantResponse(t, c, c.Block(), 503, false, "Block, the backup failing too"); resp != unavailable {
		t.Fatalf("Block answered with %p, want the upstream's own 503 %p", resp, unavailable)
	}
	if n := unavailable.Body.(*closeRecorder).closed.Load(); n != 0 || ep.InFlight() != 1 {
		t.Fatalf("the relayed 503 was closed %d times, its endpoint has %d in flight; want 0 and 1 (until Finish)", n, ep.InFlight())
	}
	c.Finish(503, nil)
	if ep.InFlight() != 0 {
		t.Fatalf("after Finish the endpoint has %d in flight, want 0", ep.InFlight())
	}
}
