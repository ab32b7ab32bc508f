package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
)

// ErrTLSHandshake marks a transport's failure to complete the TLS
// handshake of a new connection to an endpoint (a certificate that does
// not verify, a protocol the endpoint refuses, a handshake cut short or
// too slow). No request was sent on it, so Classify reports it as a
// ConnectFailure whatever the handshake met, a timeout or an EOF included.
// Transports wrap it around the handshake's error:
//
//	fmt.Errorf("%w with %s: %w", retry.ErrTLSHandshake, addr, err)
var ErrTLSHandshake = errors.New("tls handshake failed")

// Classify names the retry condition of a transport error, or returns 0
// when the error is not one worth retrying (including the caller's own
// cancellation, which no retry can fix). It sees only the error: a reset
// or EOF is reported as Reset, and the caller must not retry one that came
// after the first response byte.
func Classify(err error) Condition {
	if err == nil || errors.Is(err, context.Canceled) {
		return 0
	}
	if errors.Is(err, ErrTLSHandshake) {
		return ConnectFailure
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// Even a dial timeout is a connect failure: the upstream never saw
		// the request, which is what ConnectFailure promises. (Checked
		// before DeadlineExceeded: net's dial timeout error says it is one.)
		return ConnectFailure
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ConnectFailure
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Timeout
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return Reset
	}
	return 0
}

// Retryable reports whether a request may be sent again: its method is
// idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE, as RFC 9110 §9.2.2
// defines them), it carries an Idempotency-Key header, or the route opts
// in. Anything else (POST, PATCH, CONNECT, unknown methods) might apply
// twice if the first attempt reached the upstream before it failed.
func Retryable(method string, header http.Header, routeOptIn bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return routeOptIn || header.Get("Idempotency-Key") != ""
}
