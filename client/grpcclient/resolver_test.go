package grpcclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/client/grpcclient"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/registryd"
)

// The resolver routes real calls to what is registered, and follows
// registrations and deregistrations pushed by the registry's watch.
func TestResolverFollowsRegistrations(t *testing.T) {
	env := startRegistry(t)
	a, b := startServer(t, "a"), startServer(t, "b")
	env.register(t, "orders", a, 0)
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""))

	waitUntil(t, c, "a answers", 5, func(id string) bool { return id == "a" })

	env.register(t, "orders", b, 0)
	seen := map[string]bool{}
	waitUntil(t, c, "both a and b answer", 1, func(id string) bool { seen[id] = true; return seen["a"] && seen["b"] })

	env.deregister(t, a)
	waitUntil(t, c, "only b answers", 20, func(id string) bool { return id == "b" })
	before := a.calls.Load()
	for range 20 {
		if id, err := call(context.Background(), c); err != nil || id != "b" {
			t.Fatalf("after a's deregistration: %q, %v; want b", id, err)
		}
	}
	if n := a.calls.Load() - before; n != 0 {
		t.Fatalf("a got %d calls after it was deregistered and b took 20 in a row", n)
	}
}

// A registry that goes down does not take the service down: the cached
// view keeps routing.
func TestResolverKeepsRoutingWhileTheRegistryIsDown(t *testing.T) {
	env := startRegistry(t)
	a := startServer(t, "a")
	env.register(t, "orders", a, 0)
	c := dial(t, env.builder(t), "orders", lbConfig(balance.RoundRobinName, ""))
	waitUntil(t, c, "a answers", 1, func(id string) bool { return id == "a" })

	env.srv.Close()
	for i := range 20 {
		if id, err := call(context.Background(), c); err != nil || id != "a" {
			t.Fatalf("call %d with the registry down: %q, %v; want a", i, id, err)
		}
	}
}

// A service without instances fails calls fast with Unavailable and says
// why, instead of hanging until the deadline.
func TestResolverEmptyServiceFailsWithUnavailable(t *testing.T) {
	env := startRegistry(t)
	b, err := grpcclient.NewResolverBuilder(env.reg, grpcclient.ResolverOptions{Logger: quiet(), ReportAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := dial(t, b, "nobody", lbConfig(balance.RoundRobinName, ""))
	_, err = call(context.Background(), c)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no instances") {
		t.Fatalf("call to a service without instances: %v; want Unavailable saying it has no instances", err)
	}
}

// While a service has no instance, a fail-fast call fails at once with
// Unavailable, and a WaitForReady call waits: until its deadline, or
// until an instance registers, which then answers it.
func TestWaitForReadyCallsWaitForAnInstance(t *testing.T) {
	env := startRegistry(t)
	b, err := grpcclient.NewResolverBuilder(env.reg, grpcclient.ResolverOptions{Logger: quiet(), ReportAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := dial(t, b, "orders", lbConfig(balance.RoundRobinName, ""))
	if _, err := call(context.Background(), c); status.Code(err) != codes.Unavailable {
		t.Fatalf("fail-fast call without instances: %v; want Unavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("WaitForReady call without instances: %v; want DeadlineExceeded (it waits for one)", err)
	}

	s := startServer(t, "a")
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := call(context.Background(), c, grpc.WaitForReady(true))
		done <- result{id, err}
	}()
	env.register(t, "orders", s, 0)
	if r := <-done; r.err != nil || r.id != "a" {
		t.Fatalf("WaitForReady call while an instance registers: %q, %v; want a's answer", r.id, r.err)
	}
}

// The embedded registry's in-process Discoverer works as well as the
// Consul API, and a target's tag parameters filter instances.
func TestResolverOverTheEmbeddedDiscovererWithTags(t *testing.T) {
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a, b := startServer(t, "a"), startServer(t, "b")
	ctx := context.Background()
	for _, s := range []*testServer{a, b} {
		in := registryInstance("orders", s)
		if s == b {
			in.Instance.Tags = []string{"v2"}
		}
		if err := srv.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	rb, err := grpcclient.NewResolverBuilder(srv.Discoverer(), grpcclient.ResolverOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	cc, err := grpc.NewClient("switchboard:///orders?tag=v2",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb),
		grpc.WithDefaultServiceConfig(lbConfig(balance.RandomName, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := newClient(cc)
	for i := range 20 {
		if id, err := call(ctx, c); err != nil || id != "b" {
			t.Fatalf("call %d to orders?tag=v2: %q, %v; want b (the only v2)", i, id, err)
		}
	}
}

func TestQueryRejectsTargetsWithoutAService(t *testing.T) {
	for _, target := range []string{"switchboard:///", "switchboard:///a/b"} {
		_, err := grpcclient.Query(resolver.Target{URL: *mustParse(t, target)})
		if err == nil || !strings.Contains(err.Error(), "want switchboard:///SERVICE") {
			t.Errorf("Query(%s): %v; want an error naming the form", target, err)
		}
	}
	q, err := grpcclient.Query(resolver.Target{URL: *mustParse(t, "switchboard:///orders?tag=a&tag=b")})
	if err != nil || q.Service != "orders" || strings.Join(q.Tags, ",") != "a,b" {
		t.Fatalf("Query: %+v, %v; want orders with tags a, b", q, err)
	}
}

// With a registry that never answers (and no cache), calls fail with
// Unavailable and the registry's error once ReportAfter has passed,
// instead of waiting for their deadline.
func TestResolverReportsARegistryThatNeverAnswered(t *testing.T) {
	env := startRegistry(t)
	env.srv.Close()
	b, err := grpcclient.NewResolverBuilder(env.reg, grpcclient.ResolverOptions{Logger: quiet(), ReportAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := dial(t, b, "orders", lbConfig(balance.RoundRobinName, ""))
	start := time.Now()
	_, err = call(context.Background(), c)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no answer from the registry") {
		t.Fatalf("call with the registry down from the start: %v; want Unavailable saying the registry has not answered", err)
	}
	if el := time.Since(start); el > 8*time.Second {
		t.Fatalf("the call failed after %v; want well before its 10s deadline", el)
	}
}

// Register makes the scheme work for every ClientConn of the process.
func TestRegisterMakesTheSchemeGlobal(t *testing.T) {
	env := startRegistry(t)
	env.register(t, "global", startServer(t, "a"), 0)
	grpcclient.Register(env.builder(t))
	cc, err := grpc.NewClient("switchboard:///global",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(lbConfig(balance.RoundRobinName, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if id, err := call(context.Background(), newClient(cc)); err != nil || id != "a" {
		t.Fatalf("call through the globally registered resolver: %q, %v; want a", id, err)
	}
}

// With a cache directory, a client that starts while the registry is down
// routes on the instances it last saw.
func TestResolverStartsFromTheCacheWhileTheRegistryIsDown(t *testing.T) {
	env := startRegistry(t)
	a := startServer(t, "a")
	env.register(t, "orders", a, 0)
	opts := grpcclient.ResolverOptions{Logger: quiet(), Discovery: discovery.Options{CacheDir: t.TempDir()}}

	first, err := grpcclient.NewResolverBuilder(env.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, first, "orders", lbConfig(balance.RoundRobinName, ""))
	waitUntil(t, c, "a answers", 1, func(id string) bool { return id == "a" })
	first.Close() // writes the cache

	env.srv.Close()
	second, err := grpcclient.NewResolverBuilder(env.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	c = dial(t, second, "orders", lbConfig(balance.RoundRobinName, ""))
	if id, err := call(context.Background(), c); err != nil || id != "a" {
		t.Fatalf("call with the registry down, from the cache: %q, %v; want a", id, err)
	}
}
