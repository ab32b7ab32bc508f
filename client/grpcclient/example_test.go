package grpcclient_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registryd"
)

// exampleServer is a TestService on loopback answering with its id, or
// with fail when it is set.
type exampleServer struct {
	testgrpc.UnimplementedTestServiceServer
	id   string
	fail codes.Code
}

func (s *exampleServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.fail != codes.OK {
		return nil, status.Error(s.fail, s.id+" is failing")
	}
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

// serve starts s and registers it in reg as an instance of service.
func serve(reg *registryd.Server, service string, s *exampleServer) (stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, s)
	go srv.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	err = reg.Register(context.Background(), registry.Registration{Instance: registry.Instance{
		ID: s.id, Service: service, Address: "127.0.0.1", Port: port,
	}})
	if err != nil {
		panic(err)
	}
	return srv.Stop
}

// Calls to switchboard:///orders are resolved through a registry (here the
// embedded one, in process) and spread by switchboard_round_robin.
func Example() {
	reg, _ := registryd.New(registryd.Config{Logger: quiet()})
	defer reg.Close()
	defer serve(reg, "orders", &exampleServer{id: "a"})()
	defer serve(reg, "orders", &exampleServer{id: "b"})()

	rb, err := grpcclient.NewResolverBuilder(reg.Discoverer(), grpcclient.ResolverOptions{Logger: quiet()})
	if err != nil {
		panic(err)
	}
	defer rb.Close()
	cc, err := grpc.NewClient("switchboard:///orders",
		grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(grpcclient.ServiceConfig(balance.RoundRobinName, balance.Config{})))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	orders := testgrpc.NewTestServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Round robin spreads over the connected servers: call until both
	// are, then count.
	for seen := map[string]bool{}; len(seen) < 2; {
		r, err := orders.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			panic(err)
		}
		seen[r.ServerId] = true
	}
	count := map[string]int{}
	for range 10 {
		r, err := orders.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			panic(err)
		}
		count[r.ServerId]++
	}
	fmt.Println(count)
	// Output: map[a:5 b:5]
}

// A failing service is answered by the fallback, and the answer says so in
// the call's header metadata; once the breaker opens the server is no
// longer called.
func ExampleUnaryFallback() {
	reg, _ := registryd.New(registryd.Config{Logger: quiet()})
	defer reg.Close()
	defer serve(reg, "prices", &exampleServer{id: "a", fail: codes.Unavailable})()
	rb, _ := grpcclient.NewResolverBuilder(reg.Discoverer(), grpcclient.ResolverOptions{Logger: quiet()})
	defer rb.Close()

	br, _ := breaker.New(breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Minute})
	lastKnown := grpcclient.FallbackStep{Name: "last_known", Func: func(_ context.Context, _ string, _, reply any, _ error) error {
		reply.(*testgrpc.SimpleResponse).ServerId = "yesterday's prices"
		return nil
	}}
	cc, _ := grpc.NewClient("switchboard:///prices",
		grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(grpcclient.ServiceConfig(balance.P2CEWMAName, balance.Config{})),
		grpc.WithChainUnaryInterceptor(
			grpcclient.UnaryFallback(0, lastKnown),
			grpcclient.UnaryBreaker(br, 0),
		))
	defer cc.Close()
	prices := testgrpc.NewTestServiceClient(cc)

	for range 3 {
		var header metadata.MD
		r, err := prices.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}, grpc.Header(&header))
		reason, _ := grpcclient.Degraded(header)
		fmt.Printf("%q, err %v, degraded %q\n", r.GetServerId(), err, reason)
	}
	// Output:
	// "yesterday's prices", err <nil>, degraded "last_known: code:Unavailable"
	// "yesterday's prices", err <nil>, degraded "last_known: code:Unavailable"
	// "yesterday's prices", err <nil>, degraded "last_known: breaker_open"
}

// Calls carrying the same key go to the same server under
// switchboard_consistent_hash.
func ExampleWithHashKey() {
	reg, _ := registryd.New(registryd.Config{Logger: quiet()})
	defer reg.Close()
	for _, id := range []string{"a", "b", "c"} {
		defer serve(reg, "carts", &exampleServer{id: id})()
	}
	rb, _ := grpcclient.NewResolverBuilder(reg.Discoverer(), grpcclient.ResolverOptions{Logger: quiet()})
	defer rb.Close()
	cc, _ := grpc.NewClient("switchboard:///carts",
		grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"switchboard_consistent_hash":{"hash_key":"metadata:x-user-id"}}]}`))
	defer cc.Close()
	carts := testgrpc.NewTestServiceClient(cc)

	// The ring holds the connected servers: call with other keys until all
	// three are.
	for i, seen := 0, map[string]bool{}; len(seen) < 3; i++ {
		ctx := grpcclient.WithHashKey(context.Background(), fmt.Sprint("warm-up-", i))
		r, err := carts.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			panic(err)
		}
		seen[r.ServerId] = true
	}
	ctx := grpcclient.WithHashKey(context.Background(), "user-42")
	servers := map[string]bool{}
	for range 10 {
		r, err := carts.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			panic(err)
		}
		servers[r.ServerId] = true
	}
	fmt.Println("servers for user-42:", len(servers))
	// Output: servers for user-42: 1
}
