package clienttest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/registry"
)

// GRPCServer is one gRPC server of a test fleet on a loopback port. It
// serves grpc-go's test service, grpc.testing.TestService (package
// google.golang.org/grpc/interop/grpc_testing: call it with
// testgrpc.NewTestServiceClient), whose EmptyCall and UnaryCall it
// implements (UnaryCall answers with ServerId set to the instance ID and
// Hostname to the address), and the standard health service
// (grpc.health.v1.Health). Every call except health calls is counted, and
// suffers the injected faults. Its methods are safe for concurrent use, but
// those that can fail the test (Register, Deregister, Revive) must be
// called from the test's goroutine.
type GRPCServer struct {
	in     *instance
	health *grpchealth.Server
}

// StartGRPC starts a gRPC server on 127.0.0.1 (a free port) and, when reg
// is not nil, registers it under opts.Service with a TCP check (the
// registry has no gRPC check) and returns once the registry lists it
// passing. The server is stopped (and deregistered, if the registry runs)
// when the test ends. opts.Handler is ignored.
func StartGRPC(tb testing.TB, reg *Registry, opts Options) *GRPCServer {
	tb.Helper()
	in, ln := newInstance(tb, reg, opts, "grpc")
	s := &GRPCServer{in: in, health: grpchealth.NewServer()}
	s.SetServing(true)
	in.serve = s.serve
	in.start(ln)
	return s
}

// StartGRPCFleet starts n gRPC servers with StartGRPC and the same opts
// (each gets its own port and ID; opts.ID must be empty).
func StartGRPCFleet(tb testing.TB, reg *Registry, n int, opts Options) []*GRPCServer {
	tb.Helper()
	return startFleet(tb, n, opts, "gRPC", func() *GRPCServer { return StartGRPC(tb, reg, opts) })
}

// InstanceMetadataKey is the response header (gRPC metadata) in which a
// gRPC server names itself on every call, failures included.
const InstanceMetadataKey = "x-clienttest-instance"

func (s *GRPCServer) serve(ln net.Listener) func() {
	// A stopped grpc.Server cannot serve again: each life gets a new one.
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	)
	testgrpc.RegisterTestServiceServer(srv, &testService{in: s.in})
	healthpb.RegisterHealthServer(srv, s.health)
	go srv.Serve(ln)
	// Stop closes the listener and every connection, cutting the calls in
	// progress: what a crash does to the clients.
	return srv.Stop
}

func isHealth(method string) bool {
	return strings.HasPrefix(method, "/"+healthpb.Health_ServiceDesc.ServiceName+"/")
}

// admit counts a call, tells the client who answers, and applies the
// faults; a non-nil error is the call's answer.
func (s *GRPCServer) admit(ctx context.Context) error {
	in := s.in
	in.requests.Add(1)
	grpc.SetHeader(ctx, metadata.Pairs(InstanceMetadataKey, in.id))
	f := in.faults.Load()
	if !in.delay(ctx, f.latency) {
		return status.FromContextError(ctx.Err()).Err()
	}
	if f.failing {
		return status.Errorf(codes.Code(f.code), "clienttest: %s fails with %s", in.id, codes.Code(f.code))
	}
	return nil
}

func (s *GRPCServer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isHealth(info.FullMethod) {
		return handler(ctx, req)
	}
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *GRPCServer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isHealth(info.FullMethod) {
		return handler(srv, ss)
	}
	if err := s.admit(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}

type testService struct {
	testgrpc.UnimplementedTestServiceServer
	in *instance
}

func (t *testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (t *testService) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if n := req.GetResponseSize(); n < 0 || n > 1<<20 {
		return nil, status.Errorf(codes.InvalidArgument, "response_size: %d is not within 0-1MiB", n)
	}
	return &testgrpc.SimpleResponse{
		ServerId: t.in.id,
		Hostname: t.in.addr,
		Payload:  &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())},
	}, nil
}

// ID is the instance ID the server registers under.
func (s *GRPCServer) ID() string { return s.in.id }

// Addr is the server's host:port (a gRPC target); it stays the same across
// Kill and Revive.
func (s *GRPCServer) Addr() string { return s.in.addr }

// Instance is the server as the registry lists it.
func (s *GRPCServer) Instance() registry.Instance { return s.in.instance() }

// Requests counts the calls the server has received, whatever their fate,
// health calls excepted.
func (s *GRPCServer) Requests() int64 { return s.in.requests.Load() }

// Slow adds d of latency to every call from now on, before it is answered
// or failed; 0 removes it. A call whose deadline passes during the wait
// ends with DeadlineExceeded (Canceled if the client cancels it).
func (s *GRPCServer) Slow(d time.Duration) { s.in.slow(d) }

// Fail makes every call from now on end with code (e.g. codes.Unavailable)
// and a message naming the instance. The registry keeps listing the
// server, and the health service keeps answering SERVING (see SetServing).
// codes.OK, or a code grpc-go does not define, is a bug in the test: Fail
// panics.
func (s *GRPCServer) Fail(code codes.Code) {
	if code == codes.OK || code > codes.Unauthenticated {
		panic(fmt.Sprintf("clienttest: Fail(%v): not a gRPC error code", code))
	}
	s.in.fail(int(code))
}

// Heal removes the latency of Slow and the failure of Fail.
func (s *GRPCServer) Heal() { s.in.heal() }

// SetServing sets what the health service answers for the server ("") and
// for Options.Service: SERVING when true (the start), NOT_SERVING when
// false. Clients with gRPC health checking stop picking the server; the
// registry, whose check is a TCP connect, does not notice.
func (s *GRPCServer) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	if s.in.opts.Service != "" {
		s.health.SetServingStatus(s.in.opts.Service, st)
	}
}

// Kill stops the server as a crash would: the listener and every live
// connection are closed, calls in progress are cut (clients see
// Unavailable). The registration is left alone: the registry lists a dead
// target until its check fails (within CheckInterval; with NoCheck,
// never). Call Deregister first for a graceful shutdown. Killing a dead
// server does nothing.
func (s *GRPCServer) Kill() { s.in.kill() }

// Revive serves again on the same address, with the same faults, counter
// and serving status. If the server is registered and the registry runs,
// it returns once the registry lists it passing again. It does not
// register a server that was deregistered: call Register. Reviving a live
// server does nothing.
func (s *GRPCServer) Revive() { s.in.revive() }

// Alive reports whether the server is serving (not killed).
func (s *GRPCServer) Alive() bool { return s.in.alive() }

// Register registers the server (again) and waits until the registry lists
// it passing.
func (s *GRPCServer) Register() { s.in.register() }

// Deregister removes the server from the registry; it keeps serving.
func (s *GRPCServer) Deregister() { s.in.deregister() }
