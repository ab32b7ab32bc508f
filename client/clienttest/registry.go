package clienttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

// WaitTimeout bounds every wait of this package: for an instance to be
// listed passing, for a query's instances to match. It is generous so that
// a loaded machine running the race detector does not fail a test that
// would pass; a test that reaches it has a real problem.
var WaitTimeout = 15 * time.Second

// Registry is an embedded registry (registryd) listening on a loopback
// port, with a Consul client for it. It can be stopped and restarted on the
// same address with its registrations intact, to test how code rides out a
// registry outage. Stop and Restart must not run concurrently with each
// other, and Restart, which fails the test that started the registry when
// it cannot listen again, must be called from that test's goroutine.
type Registry struct {
	tb     testing.TB
	addr   string
	dir    string
	log    *slog.Logger
	client *consul.Registry

	mu  sync.Mutex
	srv *registryd.Server // nil while stopped
}

// StartRegistry starts an embedded registry on 127.0.0.1 (a free port) and
// stops it when the test ends. Its state is kept in a temporary directory,
// so that Restart brings back what Stop took away.
func StartRegistry(tb testing.TB) *Registry {
	tb.Helper()
	r := &Registry{tb: tb, dir: tb.TempDir(), log: testLogger(tb)}
	srv, err := r.start("127.0.0.1:0")
	if err != nil {
		tb.Fatalf("clienttest: start the registry: %v", err)
	}
	r.srv, r.addr = srv, srv.Addr()
	client, err := consul.New(consul.Config{Address: r.addr, Logger: r.log})
	if err != nil {
		srv.Close()
		tb.Fatalf("clienttest: a consul client for the registry: %v", err)
	}
	r.client = client
	tb.Cleanup(func() {
		r.Stop()
		client.Close()
	})
	return r
}

func (r *Registry) start(listen string) (*registryd.Server, error) {
	srv, err := registryd.New(registryd.Config{Listen: listen, DataDir: r.dir, NodeName: "clienttest", Logger: r.log})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// Addr is the registry's host:port (the same across restarts); Consul
// clients use it as their address.
func (r *Registry) Addr() string { return r.addr }

// Client is a registry/consul backend for the registry, over HTTP: a
// registry.Registrar, registry.Heartbeater and registry.Discoverer, the
// same thing a program gets from consul.New in production. It stays valid
// across Stop and Restart (its calls fail while the registry is stopped).
// Do not close it; the Registry does.
func (r *Registry) Client() *consul.Registry { return r.client }

// Server is the running registryd.Server, for in-process calls (no HTTP
// hop), or nil while the registry is stopped. Restart replaces it.
func (r *Registry) Server() *registryd.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

// Running reports whether the registry is serving (not stopped).
func (r *Registry) Running() bool { return r.Server() != nil }

// Stop shuts the registry down as a crash or an outage would: its port
// refuses connections, blocking queries and watches end with an error. Its
// registrations are written to disk for Restart. Stopping a stopped
// registry does nothing.
func (r *Registry) Stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Restart starts a stopped registry again on the same address, with the
// registrations it had when it stopped (their checks start again; TTL
// checks must be passed again, as after a Consul agent restart).
// Restarting a running registry stops it first. It fails the test when the
// address cannot be had back (another process took the port).
func (r *Registry) Restart() {
	r.tb.Helper()
	r.Stop()
	srv, err := r.start(r.addr)
	if err != nil {
		r.tb.Fatalf("clienttest: restart the registry on %s: %v", r.addr, err)
	}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
}

// Await waits until the IDs of q's instances are exactly ids (in any
// order) and returns the instances. Set q.PassingOnly to wait for health
// verdicts: an instance killed but still registered leaves a passing-only
// query once the registry's check fails. Await fails the test after
// WaitTimeout, naming what it saw last, or when the registry is stopped.
func (r *Registry) Await(tb testing.TB, q registry.Query, ids ...string) []registry.Instance {
	tb.Helper()
	got, err := r.await(q, ids)
	if err != nil {
		tb.Fatalf("clienttest: %v", err)
	}
	return got
}

func (r *Registry) await(q registry.Query, want []string) ([]registry.Instance, error) {
	want = slices.Sorted(slices.Values(want))
	return r.awaitCond(q, fmt.Sprintf("to be %v", want), func(ids []string) bool { return slices.Equal(ids, want) })
}

// awaitCond waits until cond holds for the sorted IDs of q's instances;
// what describes cond for the error.
func (r *Registry) awaitCond(q registry.Query, what string, cond func(ids []string) bool) ([]registry.Instance, error) {
	srv := r.Server()
	if srv == nil {
		return nil, fmt.Errorf("waiting for %s %s: the registry is stopped", describe(q), what)
	}
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	w, err := srv.Discoverer().Watch(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", describe(q), err)
	}
	defer w.Stop()
	var last []string
	for {
		insts, err := w.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("%s are still %v after %v; want them %s", describe(q), last, WaitTimeout, what)
			}
			return nil, fmt.Errorf("waiting for %s %s (last %v): %w", describe(q), what, last, err)
		}
		last = instanceIDs(insts)
		if cond(last) {
			return insts, nil
		}
	}
}

func describe(q registry.Query) string {
	s := fmt.Sprintf("the instances of %q", q.Service)
	if len(q.Tags) > 0 {
		s += fmt.Sprintf(" tagged %v", q.Tags)
	}
	if q.PassingOnly {
		s = "the passing" + s[len("the"):]
	}
	return s
}

// instanceIDs is the sorted IDs of insts.
func instanceIDs(insts []registry.Instance) []string {
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.ID
	}
	slices.Sort(ids)
	return ids
}
