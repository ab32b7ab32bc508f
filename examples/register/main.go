// Command register shows a Go service keeping itself registered for its
// whole life: it registers with a TTL health check, heartbeats the check so
// the registry keeps it passing, and deregisters on the way out, whether the
// program ends or gets SIGINT/SIGTERM. A second instance that stops
// heartbeating without deregistering (a crash) turns critical once its TTL
// lapses, and leaves the passing set.
//
// It is what Python services do with python-consul:
//
//	c = consul.Consul()
//	c.agent.service.register("greeter", service_id=id, address=host, port=port,
//	                         check=consul.Check.ttl("1s"))
//	try:
//	    while running:
//	        c.agent.check.ttl_pass("service:" + id)
//	        time.sleep(ttl / 3)
//	finally:
//	    c.agent.service.deregister(id)
//
// Here registry.Agent runs that loop (and registers again if the registry
// forgets the instance), over the registry/consul backend, against the
// embedded registry started in-process on a loopback port. Point
// consul.Config.Address at a Consul agent and the same code registers there.
//
// Run it with:
//
//	go run ./examples/register
//
// It exits by itself after a few seconds; press Ctrl-C to end it sooner
// (the instance is deregistered all the same).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

const (
	service = "greeter"
	ttl     = time.Second
	// work is how long the service runs before it ends on its own.
	work = 2 * ttl
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "register:", err)
		os.Exit(1)
	}
}

func run() error {
	// The end of the program, on a signal or when the work is done.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	logs := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// The registry: embedded here; a Consul agent in production.
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Start(); err != nil {
		return err
	}
	reg, err := consul.New(consul.Config{Address: srv.Addr(), Logger: logs})
	if err != nil {
		return err
	}
	defer reg.Close()
	fmt.Println("registry (Consul API) on", srv.Addr())

	// The service itself: a tiny HTTP server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	// Register with a TTL check and heartbeat it: the agent passes the
	// check at once (a TTL check starts critical) and then every TTL/3.
	agent, err := startAgent(ctx, reg, "greeter-1", port, logs)
	if err != nil {
		return err
	}
	// The python `finally:`: deregister however run returns.
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := agent.Close(cctx); err != nil {
			fmt.Println("deregistration failed:", err)
			return
		}
		insts, err := reg.Instances(cctx, registry.Query{Service: service})
		if err != nil {
			fmt.Println("after deregistration, the registry does not answer:", err)
			return
		}
		fmt.Printf("deregistered greeter-1; the registry lists %v\n", ids(insts))
	}()
	passing := registry.Query{Service: service, PassingOnly: true}
	insts, err := reg.Instances(ctx, passing)
	if err != nil {
		return err
	}
	registered := time.Now()
	fmt.Printf("registered greeter-1 at 127.0.0.1:%d with a %v TTL check; passing: %v\n", port, ttl, ids(insts))

	// A second instance whose process "crashes": its heartbeats stop and
	// nobody deregisters it. The registry turns it critical when the TTL
	// lapses, and passing-only queries drop it.
	crashCtx, crash := context.WithCancel(ctx)
	defer crash()
	crashed, err := startAgent(crashCtx, reg, "greeter-2", port+1, logs)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, reg, passing, []string{"greeter-1", "greeter-2"}); err != nil {
		return interrupted(ctx, err)
	}
	fmt.Println("greeter-2 registered too; passing: [greeter-1 greeter-2]")
	crash()
	start := time.Now()
	if err := waitFor(ctx, reg, passing, []string{"greeter-1"}); err != nil {
		return interrupted(ctx, err)
	}
	fmt.Printf("greeter-2 stopped heartbeating: critical after %.1f TTLs; passing: [greeter-1]\n",
		float64(time.Since(start))/float64(ttl))
	all, err := reg.Instances(ctx, registry.Query{Service: service})
	if err != nil {
		return interrupted(ctx, err)
	}
	for _, in := range all {
		fmt.Printf("  the registry lists %s as %s\n", in.ID, in.Health)
	}
	// A critical registration stays until someone removes it (or the
	// check's DeregisterCriticalAfter does): here, its agent's Close.
	if err := crashed.Close(context.Background()); err != nil {
		return err
	}

	// Work until the end (or a signal); the heartbeats keep greeter-1
	// passing however long that is.
	select {
	case <-ctx.Done():
		fmt.Println("signal received: shutting down")
	case <-time.After(work):
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	insts, err = reg.Instances(cctx, passing)
	if err != nil {
		return err
	}
	fmt.Printf("greeter-1 still passing after %.1f TTLs of heartbeats: %v\n",
		float64(time.Since(registered))/float64(ttl), slices.Contains(ids(insts), "greeter-1"))
	return nil
}

// interrupted turns the error of a step that a signal cut short into a
// normal end (the deferred deregistration still runs).
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		fmt.Println("signal received: shutting down")
		return nil
	}
	return err
}

func startAgent(ctx context.Context, reg *consul.Registry, id string, port int, logs *slog.Logger) (*registry.Agent, error) {
	a, err := registry.NewAgent(reg, registry.Registration{
		Instance: registry.Instance{ID: id, Service: service, Address: "127.0.0.1", Port: port,
			Meta: map[string]string{"version": "1.4.2"}},
		Check: registry.Check{TTL: ttl},
	}, registry.AgentOptions{Logger: logs})
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		a.Close(context.Background())
		return nil, fmt.Errorf("register %s: %w", id, err)
	}
	return a, nil
}

// waitFor follows q with a blocking watch until its instances are want.
func waitFor(ctx context.Context, reg *consul.Registry, q registry.Query, want []string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	w, err := reg.Watch(ctx, q)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		insts, err := w.Next(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s to be %v: %w", q.Service, want, err)
		}
		if slices.Equal(ids(insts), want) {
			return nil
		}
	}
}

func ids(insts []registry.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, in := range insts {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}
