package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
)

// The errors the interceptors return instead of calling the server. They
// are gRPC status errors; compare with errors.Is.
var (
	// ErrBreakerOpen: the breaker refused the call (Unavailable).
	ErrBreakerOpen = status.Error(codes.Unavailable, "grpcclient: circuit breaker open")
	// ErrRateLimited: the client-side rate limit refused the call
	// (ResourceExhausted).
	ErrRateLimited = status.Error(codes.ResourceExhausted, "grpcclient: client-side rate limit exceeded")
)

// ---- circuit breaker ----

// UnaryBreaker guards unary calls with b: while b is open a call fails at
// once with ErrBreakerOpen, without touching the network. A call's status
// counts as a failure when its code is in failures (0:
// DefaultFailureCodes); Canceled counts neither way; any other code, the
// server having answered, is a success. Latency feeds b's slow-call rate.
func UnaryBreaker(b *breaker.Breaker, failures Codes) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		t, err := b.Allow(start)
		if err != nil {
			return ErrBreakerOpen
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		now := time.Now()
		t.Done(Outcome(err, now.Sub(start), failures), now)
		return err
	}
}

// StreamBreaker guards streams with b like UnaryBreaker. A stream's
// outcome is reported once, when the first of these happens: creating it
// fails; RecvMsg returns io.EOF (a success) or an error; RecvMsg returns
// the response of a stream without server streaming (client streaming:
// CloseAndRecv's nil is the success, the caller reads no further); or the
// call's context ends first — a stream the caller abandons, by cancelling
// the context or letting its deadline pass, reports the context's error
// (Canceled counts neither way and frees a half-open breaker's probe
// slot; DeadlineExceeded counts as the failure it would be from RecvMsg).
func StreamBreaker(b *breaker.Breaker, failures Codes) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		start := time.Now()
		t, err := b.Allow(start)
		if err != nil {
			return nil, ErrBreakerOpen
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			now := time.Now()
			t.Done(Outcome(err, now.Sub(start), failures), now)
			return nil, err
		}
		s := &reportingStream{ClientStream: cs, unary: !desc.ServerStreams, report: func(err error) {
			now := time.Now()
			t.Done(Outcome(err, now.Sub(start), failures), now)
		}}
		// The caller's context, not cs.Context(): gRPC cancels the
		// stream's own context when RecvMsg ends the stream, before
		// RecvMsg returns the outcome to report; and cs.Context() commits
		// the stream's first attempt, ending gRPC's transparent retry.
		s.stop = context.AfterFunc(ctx, func() {
			s.once.Do(func() { s.report(status.FromContextError(ctx.Err()).Err()) })
		})
		return s, nil
	}
}

// reportingStream calls report once, with nil or the stream's error, when
// the stream's outcome is known (see StreamBreaker).
type reportingStream struct {
	grpc.ClientStream
	unary  bool // no server streaming: the first message is the answer
	once   sync.Once
	stop   func() bool // stops the report at the context's end
	report func(error)
}

func (s *reportingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.unary {
		s.once.Do(func() {
			s.stop()
			if errors.Is(err, io.EOF) {
				s.report(nil)
			} else {
				s.report(err)
			}
		})
	}
	return err
}

// ---- retry ----

// RetryOptions configure UnaryRetry and StreamRetry.
type RetryOptions struct {
	// Policy gives the attempts (the first included), the per-try timeout,
	// the backoff and the budget's settings, and, in RetryOn, what is
	// worth a retry: connect_failure and reset retry the codes in Codes,
	// timeout retries an attempt that ran out of PerTryTimeout (never one
	// that ran out of the call's own deadline, nor a DeadlineExceeded the
	// server answered before the per-try deadline: that is retried only
	// when Codes has DeadlineExceeded). Statuses and BodyLimit are
	// HTTP's and not read. With RetryNonIdempotent every method counts as
	// idempotent.
	Policy retry.Policy
	// Budget caps retries at a share of recent calls; share one per
	// service. Default: a budget of its own from Policy.
	Budget *retry.Budget
	// Codes are the status codes worth a retry. Default Unavailable.
	Codes Codes
	// Idempotent reports whether a method (its full name,
	// "/pkg.Service/Method") may be executed twice. Only idempotent calls
	// are retried: a failed call may have been executed before it failed,
	// and gRPC already retries, transparently, calls that never left the
	// client. Default: no method (unless Policy.RetryNonIdempotent).
	Idempotent func(method string) bool

	// rnd replaces the backoff's random source (tests).
	rnd func(n int64) int64
}

// IdempotentMethods returns an Idempotent func true for exactly these
// full method names.
func IdempotentMethods(methods ...string) func(string) bool {
	set := make(map[string]bool, len(methods))
	for _, m := range methods {
		set[m] = true
	}
	return func(m string) bool { return set[m] }
}

type retrier struct {
	p          retry.Policy
	conds      retry.Condition
	budget     *retry.Budget
	codes      Codes
	idempotent func(string) bool
	rnd        func(int64) int64
}

func newRetrier(o RetryOptions) (*retrier, error) {
	if err := o.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("grpcclient: retry policy: %w", err)
	}
	r := &retrier{p: o.Policy.WithDefaults(), budget: o.Budget, codes: o.Codes, idempotent: o.Idempotent, rnd: o.rnd}
	r.conds = r.p.Conditions()
	if r.budget == nil {
		r.budget = retry.NewBudget(r.p)
	}
	if r.codes == 0 {
		r.codes = CodeSet(codes.Unavailable)
	}
	return r, nil
}

// UnaryRetry retries failed unary calls of idempotent methods as o says,
// each retry paid from the budget (before its backoff, as the proxy's
// pipeline pays), and never past the call's deadline: a
// retry whose backoff would end after it is not made. Policy.PerTryTimeout
// bounds every attempt, also of methods that are not retried. A retry goes to
// another endpoint when the ClientConn uses a switchboard balancer and
// another one is ready. The call returns the last attempt's error.
func UnaryRetry(o RetryOptions) (grpc.UnaryClientInterceptor, error) {
	r, err := newRetrier(o)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, retryable := r.begin(ctx, method)
		for attempt := 0; ; attempt++ {
			// The per-try timeout bounds every attempt, the only one of a
			// call that is not retried included.
			actx, cancel := ctx, context.CancelFunc(func() {})
			if r.p.PerTryTimeout > 0 {
				actx, cancel = context.WithTimeout(ctx, r.p.PerTryTimeout)
			}
			err := invoker(actx, method, req, reply, cc, opts...)
			// A per-try timeout is this attempt's own deadline passing. A
			// DeadlineExceeded the server sent before it is the server's
			// answer (its own downstream call timed out), retried only
			// when Codes has it.
			perTry := r.p.PerTryTimeout > 0 && status.Code(err) == codes.DeadlineExceeded &&
				ctx.Err() == nil && perTryPassed(ctx, actx)
			cancel()
			if err == nil || !retryable || !r.again(ctx, attempt, err, perTry) {
				return err
			}
		}
	}, nil
}

// perTryPassed reports whether the deadline of actx, an attempt's
// context, has passed and was its per-try timeout's, not the call's own.
// It reads the clock, not actx.Err(): gRPC may end the attempt for its
// deadline (the server resets the stream at the grpc-timeout it was sent)
// a moment before actx's own timer has cancelled it.
func perTryPassed(ctx, actx context.Context) bool {
	dl, _ := actx.Deadline()
	if cdl, ok := ctx.Deadline(); ok && !dl.Before(cdl) {
		return false
	}
	return !time.Now().Before(dl)
}

// StreamRetry retries creating a stream of an idempotent method when that
// fails with a retryable code, as UnaryRetry does. Once a stream exists
// it is never retried: its messages may have been processed. The
// per-try timeout does not apply (it would cut the stream).
func StreamRetry(o RetryOptions) (grpc.StreamClientInterceptor, error) {
	r, err := newRetrier(o)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, ok := r.begin(ctx, method)
		if !ok {
			return streamer(ctx, desc, cc, method, opts...)
		}
		for attempt := 0; ; attempt++ {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil || !r.again(ctx, attempt, err, false) {
				return cs, err
			}
		}
	}, nil
}

// begin counts the call in the budget and, when the method may be
// retried, marks ctx so that the picker records the endpoints tried.
func (r *retrier) begin(ctx context.Context, method string) (context.Context, bool) {
	r.budget.Deposit(time.Now())
	if r.p.Attempts <= 1 || !(r.p.RetryNonIdempotent || (r.idempotent != nil && r.idempotent(method))) {
		return ctx, false
	}
	return context.WithValue(ctx, callKey{}, &callInfo{track: true}), true
}

// again decides on a retry after attempt failed with err, and waits the
// backoff. perTry: the attempt ran out of its per-try timeout.
func (r *retrier) again(ctx context.Context, attempt int, err error, perTry bool) bool {
	if attempt+1 >= r.p.Attempts || ctx.Err() != nil {
		return false
	}
	c := status.Code(err)
	worth := (perTry && r.conds&retry.Timeout != 0) ||
		(!perTry && r.codes.Has(c) && r.conds&(retry.ConnectFailure|retry.Reset) != 0)
	if !worth {
		return false
	}
	wait := r.p.Backoff(attempt, r.rnd)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
		return false
	}
	// The budget decides before the backoff, as the pipeline's attempt
	// loop does: while the budget is spent, a failed call returns its
	// error at once instead of waiting a backoff for a retry it will not
	// get. A call cancelled during the backoff has paid for a retry it did
	// not make, which errs on the side the budget protects.
	if !r.budget.TryWithdraw(time.Now()) {
		return false
	}
	return ratelimit.Sleep(ctx, wait) == nil
}

// ---- rate limit ----

// LimitMode says what a rate-limit interceptor does with a call over the
// limit.
type LimitMode uint8

const (
	// Reject fails the call at once with ErrRateLimited.
	Reject LimitMode = iota
	// Wait delays the call until the limiter admits it, as ratelimit.Wait
	// does (a token bucket's tokens, a leaky bucket's slot, a window's
	// room), or fails it with ErrRateLimited when the wait would outlast
	// the call's deadline or the limiter refuses (a full leaky bucket).
	Wait
)

// UnaryRateLimit admits unary calls through l (any ratelimit.Limiter:
// token bucket, leaky bucket, windows; ratelimit.New builds one from a
// Config).
func UnaryRateLimit(l ratelimit.Limiter, mode LimitMode) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := admit(ctx, l, mode); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamRateLimit admits the creation of streams through l.
func StreamRateLimit(l ratelimit.Limiter, mode LimitMode) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := admit(ctx, l, mode); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

func admit(ctx context.Context, l ratelimit.Limiter, mode LimitMode) error {
	if mode == Reject {
		if !l.AllowN(time.Now(), 1).Allowed {
			return ErrRateLimited
		}
		return nil
	}
	// ratelimit.Wait knows how each algorithm waits, and refuses at once
	// a wait that the call's deadline would cut short.
	if _, err := ratelimit.Wait(ctx, l, 1); err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(ctx.Err()).Err()
		}
		return ErrRateLimited
	}
	return nil
}

// ---- fallback ----

// MetadataDegraded is the header and trailer metadata key of a call that a
// fallback answered, with the value "<step>: <reason>" (as the proxy's
// X-Switchboard-Degraded header): "cache: breaker_open".
const MetadataDegraded = "x-switchboard-degraded"

// FallbackFunc answers a failed unary call in the server's stead: it fills
// reply (the call's response message) or returns an error. cause is the
// call's error. When the call's deadline has passed, ctx no longer carries
// it: a step that does I/O bounds it itself.
type FallbackFunc func(ctx context.Context, method string, req, reply any, cause error) error

// FallbackStep is one named way to answer; the name goes into
// MetadataDegraded.
type FallbackStep struct {
	Name string
	Func FallbackFunc
}

// UnaryFallback answers a unary call that failed with a code in on (0:
// DefaultFailureCodes, which covers ErrBreakerOpen, an empty or
// unreachable pool, exhausted retries and deadlines) with the first of
// steps that succeeds. The call then returns nil, and MetadataDegraded
// ("<step>: <reason>", reason breaker_open, rate_limited or code:CODE) is
// set in the metadata of the call's grpc.Header and grpc.Trailer options;
// read it with Degraded. When every step fails the call returns its
// own error.
func UnaryFallback(on Codes, steps ...FallbackStep) grpc.UnaryClientInterceptor {
	on = orDefault(on)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !on.Has(status.Code(err)) || callersMistake(err) || len(steps) == 0 {
			return err
		}
		fctx := ctx
		if ctx.Err() != nil {
			fctx = context.WithoutCancel(ctx)
		}
		run := make([]fallback.Step[struct{}], len(steps))
		for i, s := range steps {
			run[i] = fallback.Step[struct{}]{Name: s.Name, Run: func(ctx context.Context) (struct{}, error) {
				return struct{}{}, s.Func(ctx, method, req, reply, err)
			}}
		}
		_, step, ferr := fallback.First(fctx, run...)
		if ferr != nil {
			return err
		}
		markDegraded(opts, fallback.Degraded(step, reason(err)))
		return nil
	}
}

func reason(err error) string {
	switch {
	case errors.Is(err, ErrBreakerOpen):
		return "breaker_open"
	case errors.Is(err, ErrRateLimited):
		return "rate_limited"
	}
	return "code:" + status.Code(err).String()
}

// markDegraded sets MetadataDegraded in the header and trailer the
// caller asked for with grpc.Header and grpc.Trailer.
func markDegraded(opts []grpc.CallOption, value string) {
	set := func(md *metadata.MD) {
		if md == nil {
			return
		}
		m := md.Copy()
		if m == nil {
			m = metadata.MD{}
		}
		m.Set(MetadataDegraded, value)
		*md = m
	}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			set(o.HeaderAddr)
		case grpc.TrailerCallOption:
			set(o.TrailerAddr)
		}
	}
}

// Degraded reports whether md (a call's header or trailer) marks a
// fallback's answer, and its "<step>: <reason>".
func Degraded(md metadata.MD) (reason string, ok bool) {
	if v := md.Get(MetadataDegraded); len(v) > 0 {
		return v[0], true
	}
	return "", false
}
