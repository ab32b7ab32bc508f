package grpcclient_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testServer is a real gRPC TestService on loopback that answers
// UnaryCall with its id, optionally after a delay or with an error.
type testServer struct {
	testgrpc.UnimplementedTestServiceServer
	id    string
	addr  string
	port  int
	calls atomic.Int64
	delay atomic.Int64  // nanoseconds
	fail  atomic.Uint32 // a codes.Code to answer with; 0: none
}

func startServer(t *testing.T, id string) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{id: id, addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return s
}

func (s *testServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	if d := time.Duration(s.delay.Load()); d > 0 {
		t := time.NewTimer(d) // the server's own slowness, not a test's wait
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return nil, status.Error(c, "injected by "+s.id)
	}
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

func (s *testServer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	s.calls.Add(1)
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return status.Error(c, "injected by "+s.id)
	}
	return stream.Send(&testgrpc.StreamingOutputCallResponse{})
}

// StreamingInputCall reads the client's messages to the end, then
// answers (or fails) once.
func (s *testServer) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	s.calls.Add(1)
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return status.Error(c, "injected by "+s.id)
	}
	return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{})
}

// FullDuplexCall echoes each message's payload, or fails at once.
func (s *testServer) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.calls.Add(1)
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return status.Error(c, "injected by "+s.id)
	}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: m.GetPayload()}); err != nil {
			return err
		}
	}
}

// registryEnv is the embedded registry over HTTP and a Consul client of
// it: the registry a resolver watches and the one tests register in.
type registryEnv struct {
	srv *registryd.Server
	reg *consul.Registry
}

func startRegistry(t *testing.T) *registryEnv {
	t.Helper()
	s, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", NodeName: "test-node", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	reg, err := consul.New(consul.Config{Address: s.Addr(), WaitTime: 10 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return &registryEnv{srv: s, reg: reg}
}

func (e *registryEnv) register(t *testing.T, service string, s *testServer, weight int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.reg.Register(ctx, registry.Registration{Instance: registry.Instance{
		ID: s.id, Service: service, Address: "127.0.0.1", Port: s.port, Weight: weight,
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *registryEnv) deregister(t *testing.T, s *testServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.reg.Deregister(ctx, s.id); err != nil {
		t.Fatal(err)
	}
}

// builder returns a resolver builder over the registry, closed with t.
func (e *registryEnv) builder(t *testing.T) *grpcclient.ResolverBuilder {
	t.Helper()
	b, err := grpcclient.NewResolverBuilder(e.reg, grpcclient.ResolverOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// dial connects to switchboard:///service through b with the service
// config sc and options.
func dial(t *testing.T, b *grpcclient.ResolverBuilder, service, sc string, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(b),
		grpc.WithDefaultServiceConfig(sc),
	}, opts...)
	cc, err := grpc.NewClient("switchboard:///"+service, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// lbConfig is a service config selecting the switchboard policy with the
// JSON object cfg.
func lbConfig(policy, cfg string) string {
	if cfg == "" {
		cfg = "{}"
	}
	return `{"loadBalancingConfig":[{"` + grpcclient.BalancerName(policy) + `":` + cfg + `}]}`
}

// call makes one unary call with a 10s deadline and returns the id of the
// server that answered.
func call(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
	if err != nil {
		return "", err
	}
	return r.ServerId, nil
}

// waitUntil calls until want(serverID) has held for n calls in a row,
// failing after 10s. Calls may fail meanwhile (a resolver update in
// flight).
func waitUntil(t *testing.T, c testgrpc.TestServiceClient, what string, n int, want func(id string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	run := 0
	for run < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d calls in a row where %s within 10s", n, what)
		}
		id, err := call(context.Background(), c)
		if err == nil && want(id) {
			run++
		} else {
			run = 0
		}
	}
}

func registryInstance(service string, s *testServer) registry.Registration {
	return registry.Registration{Instance: registry.Instance{ID: s.id, Service: service, Address: "127.0.0.1", Port: s.port}}
}

func newClient(cc *grpc.ClientConn) testgrpc.TestServiceClient {
	return testgrpc.NewTestServiceClient(cc)
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
