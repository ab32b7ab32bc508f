// Command discover shows service discovery that keeps working through a
// registry outage: a discovery.View over the registry/consul backend keeps
// a cached copy of a service's instances, follows every change with a
// blocking watch, and when the registry goes away keeps answering from its
// cache, marked stale, until the registry is back.
//
// The program starts the embedded registry (with a data directory, so it
// restarts with its registrations, as a Consul agent does), registers two
// instances and watches the updates arrive; then it stops the registry,
// shows the view still answering, restarts the registry on the same
// address and sees a new registration arrive.
//
// Run it with:
//
//	go run ./examples/discover
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "discover:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dataDir, err := os.MkdirTemp("", "discover-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)

	srv, err := startRegistry("127.0.0.1:0", dataDir, quiet)
	if err != nil {
		return err
	}
	addr := srv.Addr()
	defer func() { srv.Close() }()
	fmt.Println("registry (Consul API) on", addr)

	// The client side: the Consul backend, and a Discovery over it. Short
	// backoffs make the demo quick; the defaults (100ms up to 30s) suit
	// production.
	reg, err := consul.New(consul.Config{Address: addr, Logger: quiet})
	if err != nil {
		return err
	}
	defer reg.Close()
	d, err := discovery.New(reg, discovery.Options{Registry: "consul", MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		return err
	}
	defer d.Close()
	v := d.Watch(registry.Query{Service: "orders", PassingOnly: true})
	defer v.Close()

	// Every published snapshot comes to the subscriber, in order; the
	// program prints them as they come.
	snaps := make(chan discovery.Snapshot, 64)
	defer v.Subscribe(func(s discovery.Snapshot) { snaps <- s })()
	until := func(what string, cond func(discovery.Snapshot) bool) (discovery.Snapshot, error) {
		for {
			select {
			case s := <-snaps:
				fmt.Printf("  update v%d: %v stale=%v\n", s.Version, ids(s.Instances), s.Stale)
				if cond(s) {
					return s, nil
				}
			case <-ctx.Done():
				return discovery.Snapshot{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			}
		}
	}
	count := func(n int) func(discovery.Snapshot) bool {
		return func(s discovery.Snapshot) bool { return len(s.Instances) == n && !s.Stale }
	}

	fmt.Println("watching orders; registering orders-1 and orders-2")
	for i, port := range []int{9001, 9002} {
		if err := reg.Register(ctx, registration(fmt.Sprintf("orders-%d", i+1), port)); err != nil {
			return err
		}
	}
	if _, err := until("two instances", count(2)); err != nil {
		return err
	}

	fmt.Println("the registry goes down")
	srv.Close()
	s, err := until("a stale view", func(s discovery.Snapshot) bool { return s.Stale })
	if err != nil {
		return err
	}
	fmt.Printf("during the outage the view still serves %v (stale=%v)\n", ids(v.Snapshot().Instances), s.Stale)
	fmt.Println("  last registry error:", s.LastError)
	for _, st := range d.Status() {
		fmt.Printf("  status: %s stale=%v instances=%d failed attempts>0: %v\n", st.Service, st.Stale, st.Instances, st.Errors > 0)
	}

	fmt.Println("the registry restarts on", addr, "with its registrations; orders-3 registers")
	srv, err = startRegistry(addr, dataDir, quiet)
	if err != nil {
		return err
	}
	if _, err := until("the registry answering again", count(2)); err != nil {
		return err
	}
	if err := reg.Register(ctx, registration("orders-3", 9003)); err != nil {
		return err
	}
	if _, err := until("three instances", count(3)); err != nil {
		return err
	}
	fmt.Printf("the view is fresh again: %v\n", ids(v.Snapshot().Instances))
	return nil
}

func startRegistry(listen, dataDir string, log *slog.Logger) (*registryd.Server, error) {
	srv, err := registryd.New(registryd.Config{Listen: listen, DataDir: dataDir, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// registration is an instance with no health check, which the registry
// reports passing (the instances here are addresses, not servers).
func registration(id string, port int) registry.Registration {
	return registry.Registration{Instance: registry.Instance{ID: id, Service: "orders", Address: "127.0.0.1", Port: port}}
}

func ids(insts []registry.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, in := range insts {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}
