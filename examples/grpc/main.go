// Command grpc shows switchboard's gRPC client: three gRPC servers register
// in the embedded registry (through its Consul API), and a client calls
// them through switchboard:///orders with switchboard_weighted_round_robin
// and the retry and breaker interceptors. It prints how the calls spread
// by weight, deregisters one server and shows that the calls follow, then
// kills another without deregistering it and shows that no call fails.
// Everything runs in this process, on loopback; it exits 0 within a few
// seconds.
//
//	go run ./examples/grpc
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
	"github.com/switchboard-dev/switchboard/retry"
)

// server is a gRPC TestService that answers with its instance ID.
type server struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (s *server) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "examples/grpc:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The embedded registry, speaking Consul's HTTP API on a free port.
	reg, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		return err
	}
	if err := reg.Start(); err != nil {
		return err
	}
	defer reg.Close()
	fmt.Println("embedded registry (Consul API) on", reg.Addr())
	// The official Consul client talks to it, for the servers and the
	// client alike; against a real Consul only the address changes.
	cons, err := consul.New(consul.Config{Address: reg.Addr(), Logger: quiet})
	if err != nil {
		return err
	}
	defer cons.Close()

	// Three servers with weights 1, 2 and 3.
	servers := map[string]*grpc.Server{}
	for i, weight := range []int{1, 2, 3} {
		id := fmt.Sprintf("orders-%d", i+1)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(srv, &server{id: id})
		go srv.Serve(ln)
		defer srv.Stop()
		servers[id] = srv
		port := ln.Addr().(*net.TCPAddr).Port
		err = cons.Register(ctx, registry.Registration{Instance: registry.Instance{
			ID: id, Service: "orders", Address: "127.0.0.1", Port: port, Weight: weight,
		}})
		if err != nil {
			return err
		}
		fmt.Printf("registered %s on 127.0.0.1:%d, weight %d\n", id, port, weight)
	}

	// The client: the switchboard resolver over the same registry, a
	// switchboard balancer chosen by service config, and interceptors: a
	// breaker for the service, and retries (UnaryCall is declared
	// idempotent) that go to another server within a retry budget.
	rb, err := grpcclient.NewResolverBuilder(cons, grpcclient.ResolverOptions{Logger: quiet})
	if err != nil {
		return err
	}
	defer rb.Close()
	br, err := breaker.New(breaker.Config{})
	if err != nil {
		return err
	}
	retries, err := grpcclient.UnaryRetry(grpcclient.RetryOptions{
		Policy:     retry.Policy{Attempts: 3},
		Idempotent: grpcclient.IdempotentMethods(testgrpc.TestService_UnaryCall_FullMethodName),
	})
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient("switchboard:///orders",
		grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(grpcclient.ServiceConfig(balance.WeightedRoundRobinName, balance.Config{})),
		grpc.WithChainUnaryInterceptor(grpcclient.UnaryBreaker(br, 0), retries))
	if err != nil {
		return err
	}
	defer cc.Close()
	orders := testgrpc.NewTestServiceClient(cc)

	// The balancer spreads over connected servers; wait until every one
	// has answered.
	if err := until(ctx, orders, func(seen map[string]int) bool { return len(seen) == 3 }); err != nil {
		return err
	}
	spread, err := calls(ctx, orders, 60)
	if err != nil {
		return err
	}
	fmt.Println("60 calls through switchboard:///orders with switchboard_weighted_round_robin:")
	show(spread)

	// Deregister orders-3: the registry's watch pushes the change and the
	// calls follow it.
	if err := cons.Deregister(ctx, "orders-3"); err != nil {
		return err
	}
	fmt.Println("deregistered orders-3")
	if err := until(ctx, orders, func(seen map[string]int) bool {
		return seen["orders-3"] == 0 && seen["orders-1"]+seen["orders-2"] >= 30
	}); err != nil {
		return err
	}
	if spread, err = calls(ctx, orders, 30); err != nil {
		return err
	}
	fmt.Println("30 calls after the deregistration:")
	show(spread)

	// Kill orders-2 without deregistering it, as a crash would: its
	// subchannel leaves the balancer's ready set, and a call caught in the
	// crash is retried on orders-1.
	servers["orders-2"].Stop()
	fmt.Println("killed orders-2 (still registered)")
	if spread, err = calls(ctx, orders, 30); err != nil {
		return fmt.Errorf("a call failed after orders-2 died: %w", err)
	}
	fmt.Println("30 calls after the crash, none failed:")
	show(spread)
	return nil
}

// calls makes n calls and counts the servers that answered.
func calls(ctx context.Context, c testgrpc.TestServiceClient, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			return nil, err
		}
		seen[r.ServerId]++
	}
	return seen, nil
}

// until calls, in rounds of 30, until a round's spread satisfies done.
func until(ctx context.Context, c testgrpc.TestServiceClient, done func(map[string]int) bool) error {
	for {
		seen, err := calls(ctx, c, 30)
		if err != nil {
			return err
		}
		if done(seen) {
			return nil
		}
	}
}

func show(spread map[string]int) {
	ids := make([]string, 0, len(spread))
	for id := range spread {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Printf("  %s: %d\n", id, spread[id])
	}
}
