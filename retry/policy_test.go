package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

func TestBackoffFullJitterStaysWithinCeiling(t *testing.T) {
	p := Policy{}.WithDefaults()
	wantCeil := []time.Duration{25, 50, 100, 200, 250, 250, 250}
	for n, c := range wantCeil {
		if got := p.BackoffCeiling(n); got != c*time.Millisecond {
			t.Fatalf("BackoffCeiling(%d) = %s, want min(250ms, 25ms*2^%d) = %s", n, got, n, c*time.Millisecond)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 12 {
		ceil := p.BackoffCeiling(n)
		// Ten buckets over [0, ceil]: full jitter must reach every one, not
		// cluster near the ceiling as "equal jitter" would.
		var buckets [10]int
		for range 2000 {
			d := p.Backoff(n, rng.Int64N)
			if d < 0 || d > ceil {
				t.Fatalf("Backoff(%d) = %s, outside [0, %s]", n, d, ceil)
			}
			buckets[min(int(d*10/(ceil+1)), 9)]++
		}
		for i, c := range buckets {
			if c < 100 { // expected 200 each
				t.Fatalf("Backoff(%d): bucket %d of [0, %s] got %d of 2000 draws, want about 200: %v", n, i, ceil, c, buckets)
			}
		}
	}
}

func TestBackoffExtremesAreReachable(t *testing.T) {
	p := Policy{}.WithDefaults()
	lo := p.Backoff(3, func(int64) int64 { return 0 })
	hi := p.Backoff(3, func(n int64) int64 { return n - 1 })
	if lo != 0 || hi != 200*time.Millisecond {
		t.Fatalf("Backoff(3) with extreme draws = %s and %s, want 0 and 200ms", lo, hi)
	}
}

func TestBackoffCeilingDoesNotOverflow(t *testing.T) {
	p := Policy{BackoffBase: time.Second, BackoffMax: time.Hour}
	if got := p.BackoffCeiling(1000); got != time.Hour {
		t.Fatalf("BackoffCeiling(1000) = %s, want the 1h cap", got)
	}
}

func TestValidateReportsEachBadKey(t *testing.T) {
	p := Policy{
		Attempts: -1, PerTryTimeout: -time.Second, BackoffBase: time.Second, BackoffMax: time.Millisecond,
		RetryOn: []string{"timeout", "sometimes"}, Statuses: []int{503, 42}, BodyLimit: -5,
		BudgetPercent: -10, BudgetWindow: -time.Second, MinRetriesPerSecond: -1,
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate accepted a policy with every field wrong")
	}
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *field.Error
		if !errors.As(e, &fe) {
			t.Fatalf("error %v is not a *field.Error", e)
		}
		keys = append(keys, fe.Path)
	}
	want := "attempts per_try_timeout backoff_max retry_on[1] statuses[1] body_limit budget_percent budget_window min_retries_per_second"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("Validate reported keys %q, want %q\nerror: %v", got, want, err)
	}
	if !strings.Contains(err.Error(), "budget_percent: must be between 0 and 100") {
		t.Fatalf("budget error does not explain itself: %v", err)
	}
}

func TestValidateAcceptsZeroAndDefaults(t *testing.T) {
	for _, p := range []Policy{{}, Policy{}.WithDefaults(), {Attempts: 1, BudgetPercent: 100}} {
		if err := p.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v, want nil", p, err)
		}
	}
}

func TestRetryStatusDefaultsToGatewayErrors(t *testing.T) {
	var p Policy
	for code, want := range map[int]bool{500: false, 502: true, 503: true, 504: true, 429: false} {
		if got := p.RetryStatus(code); got != want {
			t.Errorf("RetryStatus(%d) = %v, want %v", code, got, want)
		}
	}
	p.Statuses = []int{429}
	if !p.RetryStatus(429) || p.RetryStatus(503) {
		t.Error("a configured status list must replace the default, not add to it")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	// A real dial timeout: net's error for it also reports itself as
	// context.DeadlineExceeded, and must still be a connect failure.
	_, dialTimeout := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	if dialTimeout == nil || !errors.Is(dialTimeout, context.DeadlineExceeded) {
		t.Fatalf("a dial with a 1ns timeout returned %v; want a timeout that is context.DeadlineExceeded", dialTimeout)
	}
	cases := []struct {
		name string
		err  error
		want Condition
	}{
		{"nil", nil, 0},
		{"dial refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ConnectFailure},
		{"dial timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, ConnectFailure},
		{"real dial timeout", dialTimeout, ConnectFailure},
		{"real dial timeout, wrapped", fmt.Errorf("connect: %w", dialTimeout), ConnectFailure},
		{"read reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, Reset},
		{"eof", fmt.Errorf("reading response: %w", io.EOF), Reset},
		{"read timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, Timeout},
		{"deadline", context.DeadlineExceeded, Timeout},
		{"caller canceled", context.Canceled, 0},
		{"other", errors.New("tls: bad certificate"), 0},
		{"tls handshake: bad certificate", fmt.Errorf("%w with a:1: %w", ErrTLSHandshake, errors.New("x509: certificate signed by unknown authority")), ConnectFailure},
		{"tls handshake: cut short", fmt.Errorf("%w with a:1: %w", ErrTLSHandshake, io.EOF), ConnectFailure},
		{"tls handshake: too slow", fmt.Errorf("%w with a:1: %w", ErrTLSHandshake, context.DeadlineExceeded), ConnectFailure},
		{"tls handshake: caller canceled", fmt.Errorf("%w with a:1: %w", ErrTLSHandshake, context.Canceled), 0},
	}
	for _, c := range cases {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%s) = %v, want %v", c.name, got, c.want)
		}
	}
	p := Policy{RetryOn: []string{"connect_failure"}}
	if p.RetryError(context.DeadlineExceeded) || !p.RetryError(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}) {
		t.Error("RetryError must follow retry_on: connect_failure only")
	}
}

func TestRetryableIdempotencyRule(t *testing.T) {
	key := http.Header{"Idempotency-Key": {"8e03978e-40d5-43e8-bc93-6894a57f9324"}}
	cases := []struct {
		method string
		header http.Header
		optIn  bool
		want   bool
	}{
		{http.MethodGet, nil, false, true},
		{http.MethodHead, nil, false, true},
		{http.MethodOptions, nil, false, true},
		{http.MethodTrace, nil, false, true},
		{http.MethodPut, nil, false, true},
		{http.MethodDelete, nil, false, true},
		{http.MethodPost, nil, false, false},
		{http.MethodPatch, nil, false, false},
		{http.MethodConnect, nil, false, false},
		{"PROPFIND", nil, false, false},
		{"get", nil, false, false}, // methods are case-sensitive (RFC 9110 §9.1)
		{http.MethodPost, key, false, true},
		{http.MethodPatch, key, false, true},
		{http.MethodPost, http.Header{"Idempotency-Key": {""}}, false, false},
		{http.MethodPost, nil, true, true},
		{"PROPFIND", nil, true, true},
	}
	for _, c := range cases {
		if got := Retryable(c.method, c.header, c.optIn); got != c.want {
			t.Errorf("Retryable(%s, %v, optIn=%v) = %v, want %v", c.method, c.header, c.optIn, got, c.want)
		}
	}
}
