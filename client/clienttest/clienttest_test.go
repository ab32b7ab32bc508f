package clienttest_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/client/clienttest"
	"github.com/switchboard-dev/switchboard/registry"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// consulClient is HashiCorp's official client pointed at addr.
func consulClient(t *testing.T, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get does one GET with a fresh connection and returns status, body and
// the answering instance.
func get(t *testing.T, client *http.Client, url string) (int, string, string, error) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get(clienttest.InstanceHeader), err
}

func ids(insts []registry.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	slices.Sort(out)
	return out
}

func TestRegistryStopAndRestartKeepAddressAndRegistrations(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	c := consulClient(t, reg.Addr())
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "billing-1", Name: "billing", Address: "127.0.0.1", Port: 9001,
	})
	if err != nil {
		t.Fatalf("register with the official client: %v", err)
	}
	addr := reg.Addr()

	reg.Stop()
	if reg.Running() || reg.Server() != nil {
		t.Fatal("a stopped registry reports itself running")
	}
	if _, _, err := c.Health().Service("billing", "", false, nil); err == nil {
		t.Fatal("a stopped registry answered a query")
	}
	if _, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "billing"}); err == nil {
		t.Fatal("Client().Instances succeeded against a stopped registry")
	}

	reg.Restart()
	if reg.Addr() != addr || reg.Server().Addr() != addr {
		t.Fatalf("restarted on %s (Addr %s), want %s", reg.Server().Addr(), reg.Addr(), addr)
	}
	entries, _, err := c.Health().Service("billing", "", false, nil)
	if err != nil {
		t.Fatalf("query after the restart: %v", err)
	}
	if len(entries) != 1 || entries[0].Service.ID != "billing-1" {
		t.Fatalf("after the restart the registry lists %d entries, want billing-1 alone", len(entries))
	}
}

func TestHTTPServerRegistersPassingAndAnswersWithItsID(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	s := clienttest.StartHTTP(t, reg, clienttest.Options{Service: "web", Tags: []string{"v2"}, Zone: "eu-1", Weight: 3})

	// StartHTTP returned: the registry lists it passing already.
	insts, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "web", Tags: []string{"v2"}, PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ID != s.ID() || insts[0].HostPort() != s.Addr() || insts[0].Zone != "eu-1" || insts[0].Weight != 3 {
		t.Fatalf("the registry lists %+v; want %s at %s, zone eu-1, weight 3, passing", insts, s.ID(), s.Addr())
	}
	if got := s.Instance(); got.ID != s.ID() || got.HostPort() != s.Addr() {
		t.Fatalf("Instance() = %+v, want %s at %s", got, s.ID(), s.Addr())
	}
	checks, err := consulClient(t, reg.Addr()).Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	chk := checks["service:"+s.ID()]
	if chk == nil || chk.Type != "http" || chk.Status != api.HealthPassing {
		t.Fatalf("check service:%s = %+v; want a passing http check", s.ID(), chk)
	}

	code, body, who, err := get(t, http.DefaultClient, s.URL()+"/anything")
	if err != nil || code != 200 || body != s.ID()+"\n" || who != s.ID() {
		t.Fatalf("GET = %d %q (instance %q), %v; want 200 %q", code, body, who, err, s.ID()+"\n")
	}
	// Health checks are not requests.
	if code, _, _, err := get(t, http.DefaultClient, s.URL()+clienttest.HealthPath); err != nil || code != 200 {
		t.Fatalf("GET %s = %d, %v", clienttest.HealthPath, code, err)
	}
	if n := s.Requests(); n != 1 {
		t.Fatalf("Requests() = %d after one request and health checks, want 1", n)
	}
}

func TestHTTPServerSlowFailAndHeal(t *testing.T) {
	t.Parallel()
	s := clienttest.StartHTTP(t, nil, clienttest.Options{})
	client := &http.Client{}

	s.Slow(150 * time.Millisecond)
	start := time.Now()
	if code, _, _, err := get(t, client, s.URL()); err != nil || code != 200 {
		t.Fatalf("slowed GET = %d, %v; want 200", code, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("slowed by 150ms, the request took %v", d)
	}
	// A client that gives up sooner gets nothing.
	s.Slow(time.Minute)
	short := &http.Client{Timeout: time.Second}
	if _, _, _, err := get(t, short, s.URL()); err == nil {
		t.Fatal("a request slowed by a minute came back within the client's 1s timeout")
	}

	s.Heal()
	s.Fail(http.StatusServiceUnavailable)
	code, body, who, err := get(t, client, s.URL())
	if err != nil || code != 503 || who != s.ID() || !strings.Contains(body, s.ID()) {
		t.Fatalf("failing GET = %d %q (instance %q), %v; want 503 naming %s", code, body, who, err, s.ID())
	}
	// Health still passes: the registry would keep listing it.
	if code, _, _, _ := get(t, client, s.URL()+clienttest.HealthPath); code != 200 {
		t.Fatalf("health of a failing server = %d, want 200", code)
	}

	s.Heal()
	if code, _, _, err := get(t, client, s.URL()); err != nil || code != 200 {
		t.Fatalf("healed GET = %d, %v; want 200", code, err)
	}
	if n := s.Requests(); n != 4 {
		t.Fatalf("Requests() = %d, want 4 (slowed, cut, failed, healed)", n)
	}
}

func TestHTTPServerUnhealthyTurnsCriticalInTheRegistry(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	fleet := clienttest.StartHTTPFleet(t, reg, 2, clienttest.Options{Service: "web", CheckInterval: time.Second})
	fleet[0].SetHealthy(false)
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, fleet[1].ID())
	if code, _, _, err := get(t, http.DefaultClient, fleet[0].URL()); err != nil || code != 200 {
		t.Fatalf("an unhealthy server still serves: GET = %d, %v", code, err)
	}
	fleet[0].SetHealthy(true)
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, fleet[0].ID(), fleet[1].ID())
}

func TestHTTPServerKillCutsLiveConnectionsLeavesADeadTargetAndRevives(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	arrived := make(chan struct{}, 1)
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	})
	fleet := clienttest.StartHTTPFleet(t, reg, 2, clienttest.Options{Service: "web", Handler: hold})
	dead, live := fleet[0], fleet[1]

	cut := make(chan error, 1)
	go func() {
		resp, err := http.Get(dead.URL() + "/hold")
		if err == nil {
			resp.Body.Close()
		}
		cut <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not arrive within 10s")
	}
	dead.Kill()
	if dead.Alive() {
		t.Fatal("Alive() after Kill")
	}
	select {
	case err := <-cut:
		if err == nil {
			t.Fatal("the request in progress got an answer from a killed server")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Kill did not cut the request in progress within 10s")
	}
	if c, err := net.Dial("tcp", dead.Addr()); err == nil {
		c.Close()
		t.Fatal("a killed server accepts connections")
	}

	// Still registered: a dead target, until the check finds it critical.
	all, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(all), ids([]registry.Instance{dead.Instance(), live.Instance()}); !slices.Equal(got, want) {
		t.Fatalf("right after Kill the registry lists %v, want both %v", got, want)
	}
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, live.ID())

	dead.Revive() // returns once passing again
	insts, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "web", PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(insts), ids([]registry.Instance{dead.Instance(), live.Instance()}); !slices.Equal(got, want) {
		t.Fatalf("after Revive the passing instances are %v, want %v", got, want)
	}
	if code, body, _, err := get(t, http.DefaultClient, dead.URL()); err != nil || code != 200 || body != "ok" {
		t.Fatalf("GET after Revive = %d %q, %v", code, body, err)
	}
	if n := dead.Requests(); n != 2 {
		t.Fatalf("Requests() = %d across Kill and Revive, want 2", n)
	}
}

func TestDeregisterRemovesAtOnceAndRegisterBringsBack(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	fleet := clienttest.StartHTTPFleet(t, reg, 2, clienttest.Options{Service: "web"})
	fleet[0].Deregister()
	fleet[0].Kill()
	insts, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(insts); !slices.Equal(got, []string{fleet[1].ID()}) {
		t.Fatalf("after Deregister the registry lists %v, want only %s", got, fleet[1].ID())
	}
	fleet[0].Revive()
	if insts, _ := reg.Client().Instances(ctxT(t), registry.Query{Service: "web"}); len(insts) != 1 {
		t.Fatalf("Revive registered a deregistered server: %v", ids(insts))
	}
	fleet[0].Register()
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, fleet[0].ID(), fleet[1].ID())
}

func TestNoCheckRegistersWithoutAHealthCheck(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	s := clienttest.StartHTTP(t, reg, clienttest.Options{Service: "web", NoCheck: true})
	checks, err := consulClient(t, reg.Addr()).Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 0 {
		t.Fatalf("NoCheck registered checks: %v", checks)
	}
	s.Kill()
	insts, err := reg.Client().Instances(ctxT(t), registry.Query{Service: "web", PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ID != s.ID() {
		t.Fatalf("a killed server without a check: passing instances %v, want %s", ids(insts), s.ID())
	}
}

func TestFleetRidesOutARegistryRestart(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	fleet := clienttest.StartHTTPFleet(t, reg, 3, clienttest.Options{Service: "web"})
	want := []string{fleet[0].ID(), fleet[1].ID(), fleet[2].ID()}
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, want...)
	reg.Stop()
	for _, s := range fleet {
		if code, _, _, err := get(t, http.DefaultClient, s.URL()); err != nil || code != 200 {
			t.Fatalf("%s during the registry outage: %d, %v", s.ID(), code, err)
		}
	}
	reg.Restart()
	reg.Await(t, registry.Query{Service: "web", PassingOnly: true}, want...)
}

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestGRPCServerServesFailsSlowsAndRevives(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	fleet := clienttest.StartGRPCFleet(t, reg, 2, clienttest.Options{Service: "echo"})
	s, other := fleet[0], fleet[1]
	checks, err := consulClient(t, reg.Addr()).Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	if chk := checks["service:"+s.ID()]; chk == nil || chk.Type != "tcp" || chk.Status != api.HealthPassing {
		t.Fatalf("check service:%s = %+v; want a passing tcp check", s.ID(), chk)
	}
	cc := dialGRPC(t, s.Addr())
	tc := testgrpc.NewTestServiceClient(cc)
	hc := healthpb.NewHealthClient(cc)
	ctx := ctxT(t)

	var hdr metadata.MD
	resp, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 3}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetServerId() != s.ID() || resp.GetHostname() != s.Addr() || len(resp.GetPayload().GetBody()) != 3 {
		t.Fatalf("UnaryCall = %v; want server_id %s, hostname %s, 3 bytes", resp, s.ID(), s.Addr())
	}
	if got := hdr.Get(clienttest.InstanceMetadataKey); !slices.Equal(got, []string{s.ID()}) {
		t.Fatalf("header %s = %v, want [%s]", clienttest.InstanceMetadataKey, got, s.ID())
	}
	for _, svc := range []string{"", "echo"} {
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q = %v, %v; want SERVING", svc, h, err)
		}
	}
	s.SetServing(false)
	if h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "echo"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after SetServing(false) = %v, %v; want NOT_SERVING", h, err)
	}
	s.SetServing(true)

	s.Fail(codes.Unavailable)
	if _, err := tc.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), s.ID()) {
		t.Fatalf("failing EmptyCall: %v; want Unavailable naming %s", err, s.ID())
	}
	s.Heal()
	s.Slow(time.Minute)
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = tc.EmptyCall(sctx, &testgrpc.Empty{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("slowed EmptyCall with a 1s deadline: %v; want DeadlineExceeded", err)
	}
	s.Heal()
	if n := s.Requests(); n != 3 {
		t.Fatalf("Requests() = %d, want 3 (health calls are not counted)", n)
	}

	s.Kill()
	if _, err := tc.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("EmptyCall to a killed server: %v; want Unavailable", err)
	}
	reg.Await(t, registry.Query{Service: "echo", PassingOnly: true}, other.ID())
	s.Revive()
	reg.Await(t, registry.Query{Service: "echo", PassingOnly: true}, s.ID(), other.ID())
	resp, err = tc.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.GetServerId() != s.ID() {
		t.Fatalf("UnaryCall after Revive = %v, %v", resp, err)
	}
}

// fatalTB records the first Fatalf and ends the goroutine, as testing.T
// does; everything else goes to the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestBadOptionsFailTheTestNamingTheField(t *testing.T) {
	t.Parallel()
	reg := clienttest.StartRegistry(t)
	tests := []struct {
		name string
		fn   func(tb testing.TB)
		want string
	}{
		{"no service", func(tb testing.TB) { clienttest.StartHTTP(tb, reg, clienttest.Options{}) }, "Options.Service: must be set"},
		{"negative interval", func(tb testing.TB) {
			clienttest.StartGRPC(tb, reg, clienttest.Options{Service: "x", CheckInterval: -time.Second})
		}, "Options.CheckInterval: -1s must not be negative"},
		{"shared id", func(tb testing.TB) {
			clienttest.StartHTTPFleet(tb, reg, 2, clienttest.Options{Service: "x", ID: "x-1"})
		}, `Options.ID "x-1" would be shared`},
		{"register without registry", func(tb testing.TB) {
			clienttest.StartHTTP(tb, nil, clienttest.Options{}).Register()
		}, "started without a Registry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fatalOf(t, tt.fn); !strings.Contains(got, tt.want) {
				t.Fatalf("the test failed with %q; want it to say %q", got, tt.want)
			}
		})
	}
	// A stopped registry: Await says so instead of waiting.
	reg.Stop()
	got := fatalOf(t, func(tb testing.TB) { reg.Await(tb, registry.Query{Service: "web"}) })
	if !strings.Contains(got, "the registry is stopped") {
		t.Fatalf("Await on a stopped registry failed with %q", got)
	}
}

func TestFailPanicsOnCodesThatAreNotFailures(t *testing.T) {
	t.Parallel()
	h := clienttest.StartHTTP(t, nil, clienttest.Options{})
	g := clienttest.StartGRPC(t, nil, clienttest.Options{})
	for name, fail := range map[string]func(){
		"HTTP 200":     func() { h.Fail(http.StatusOK) },
		"HTTP 600":     func() { h.Fail(600) },
		"gRPC OK":      func() { g.Fail(codes.OK) },
		"gRPC code 17": func() { g.Fail(codes.Code(17)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Fail(%s) did not panic", name)
				}
			}()
			fail()
		}()
	}
	// Nothing changed: both still answer.
	if code, _, _, err := get(t, http.DefaultClient, h.URL()); err != nil || code != 200 {
		t.Fatalf("GET after the refused Fail calls = %d, %v; want 200", code, err)
	}
	cc := dialGRPC(t, g.Addr())
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctxT(t), &testgrpc.Empty{}); err != nil {
		t.Fatalf("EmptyCall after the refused Fail calls: %v", err)
	}
}
