package pipeline

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/ratelimit"
)

// The codes of the errors a pipeline returns. They are stable: the HTTP
// proxy sends them in its error bodies and the X-Switchboard-Error header.
const (
	CodeRateLimited        = "rate_limited"            // 429: a rate limit refused the request
	CodeConcurrencyLimited = "concurrency_limited"     // 503: the route's or the upstream's concurrency limit is full
	CodeBreakerOpen        = "breaker_open"            // 503: the route's breaker is open and no fallback answered
	CodeNoEndpoint         = "no_healthy_endpoint"     // 503: the upstream has no endpoint that can take traffic
	CodeConnectFailed      = "upstream_connect_failed" // 502: no endpoint accepted a connection
	CodeUpstreamTimeout    = "upstream_timeout"        // 504: the endpoint did not answer in time
	CodeUpstreamError      = "upstream_error"          // 502: the endpoint broke the exchange
	CodeBodyTooLarge       = "body_too_large"          // 413: the request body is over its limit
	CodeBadRequest         = "bad_request"             // 400: the request could not be read (its body; in the HTTP proxy also its path)
	CodeHashKeyMissing     = "hash_key_missing"        // 400: the upstream hashes with missing_key: error and the request has no key
	CodeRequestTimeout     = "request_timeout"         // 408: the caller stopped sending its body
	CodeClientClosed       = "client_closed"           // 499: the caller went away; nothing to answer
)

// StatusClientClosed is the status recorded (not sent) when the caller
// went away before an answer, as nginx does.
const StatusClientClosed = 499

// ErrRequestBody marks a failure to read the caller's own request body: the
// caller's fault, not the endpoint's. Transports wrap it.
var ErrRequestBody = errors.New("reading the request body failed")

// Error is why a call got no response: a limit refused it, or every
// attempt failed and no fallback step answered.
type Error struct {
	// Status is the HTTP status to answer with (StatusClientClosed: none).
	Status int
	// Code is one of the Code constants.
	Code string
	// Msg says what happened, for the caller.
	Msg string
	// Err is the cause, if any (the last attempt's error).
	Err error
	// Limit is the refusing limit's result, for rate_limited: its
	// Retry-After and RateLimit-* headers.
	Limit ratelimit.Result
	// RetryAfter, when not zero, is how long the caller should wait.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// SetHeaders sets the response headers the error implies: the rate limit's
// Retry-After and RateLimit-*, or Retry-After for a full concurrency limit.
func (e *Error) SetHeaders(h http.Header) {
	switch {
	case e.Code == CodeRateLimited:
		e.Limit.SetHeaders(h)
	case e.RetryAfter > 0:
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
}
