package grpcclient

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// Codes is a set of gRPC status codes: the codes that count as failures
// of an endpoint or a service, or the codes worth a retry. The zero value
// is the empty set; functions that take a Codes read it as their default.
type Codes uint32

// CodeSet returns the set of cs.
func CodeSet(cs ...codes.Code) Codes {
	var s Codes
	for _, c := range cs {
		if c < 32 {
			s |= 1 << c
		}
	}
	return s
}

// Has reports whether c is in the set.
func (s Codes) Has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

// String lists the set's codes, "Unknown|Unavailable".
func (s Codes) String() string {
	var b strings.Builder
	for c := codes.Code(0); c < 32; c++ {
		if s.Has(c) {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(c.String())
		}
	}
	return b.String()
}

// DefaultFailureCodes are the codes that say the server (not the request)
// failed: Unavailable, DeadlineExceeded, ResourceExhausted, Internal and
// Unknown. The breaker counts them against the service, the balancers
// against the endpoint, and the fallback interceptor answers them.
var DefaultFailureCodes = CodeSet(codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unknown)

func orDefault(s Codes) Codes {
	if s == 0 {
		return DefaultFailureCodes
	}
	return s
}

// Outcome turns a call's result into the endpoint.Outcome that balancers
// and breakers read, with failures deciding what counts against the
// server (0: DefaultFailureCodes):
//
//   - nil: Status 200;
//   - Canceled, or ErrNoHashKey (the caller's mistake, found before
//     anything was sent): Canceled, which counts neither way (it neither
//     opens nor closes a breaker, and frees a half-open breaker's probe
//     slot);
//   - a code in failures: Err set (a failure, whatever the breaker's or the
//     balancer's own rules for HTTP statuses);
//   - any other code (NotFound, InvalidArgument, ...): Status 200, because
//     the server answered as it should.
func Outcome(err error, latency time.Duration, failures Codes) endpoint.Outcome {
	if err == nil {
		return endpoint.Outcome{Status: 200, Latency: latency}
	}
	switch c := status.Code(err); {
	case c == codes.Canceled || callersMistake(err):
		return endpoint.Outcome{Err: err, Canceled: true, Latency: latency}
	case orDefault(failures).Has(c):
		return endpoint.Outcome{Err: err, Latency: latency}
	default:
		return endpoint.Outcome{Status: 200, Latency: latency}
	}
}

// noHashKeyError is ErrNoHashKey: a gRPC status error (gRPC hands it to
// the caller as it is) that is also balance.ErrNoHashKey.
type noHashKeyError struct{ s *status.Status }

func (e noHashKeyError) Error() string              { return e.s.Err().Error() }
func (e noHashKeyError) GRPCStatus() *status.Status { return e.s }
func (e noHashKeyError) Unwrap() error              { return balance.ErrNoHashKey }

// callersMistake reports whether err is the caller's own doing that the
// client found before sending anything (ErrNoHashKey).
func callersMistake(err error) bool { return errors.Is(err, ErrNoHashKey) }

// callKey keys the per-call state in a context.
type callKey struct{}

// callInfo is what a call carries to the picker while a retry interceptor
// runs it: the endpoints its attempts used.
type callInfo struct {
	track bool
	tried []*endpoint.Endpoint
}

func callInfoFrom(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	return ci
}

// WithHashKey returns a context whose calls carry key as their hash key
// for switchboard_consistent_hash and switchboard_maglev: calls with the
// same key go to the same server. It takes precedence over the metadata
// key named by the balancer's hash_key, and unlike reading metadata it
// costs the pick no allocation. It is balance.WithHashKey, so the same
// context keys the HTTP client's calls (package client) too.
func WithHashKey(ctx context.Context, key string) context.Context {
	return balance.WithHashKey(ctx, key)
}

// HashKey returns the hash key WithHashKey put into ctx.
func HashKey(ctx context.Context) (string, bool) { return balance.HashKeyFrom(ctx) }
