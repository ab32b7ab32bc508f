package discovery_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startRegistryd(t *testing.T, listen string) *registryd.Server {
	t.Helper()
	s, err := registryd.New(registryd.Config{Listen: listen, NodeName: "test-node", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapshots queues a view's snapshots; until waits for one that satisfies
// cond.
type snapshots chan discovery.Snapshot

func subscribe(t *testing.T, v *discovery.View) snapshots {
	c := make(snapshots, 1024)
	t.Cleanup(v.Subscribe(func(s discovery.Snapshot) { c <- s }))
	return c
}

func (c snapshots) until(t *testing.T, what string, cond func(discovery.Snapshot) bool) discovery.Snapshot {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-c:
			if cond(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no snapshot with %s within 10s", what)
		}
	}
}

func ids(insts []registry.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

// The whole path with real parts: the embedded registry over HTTP, the
// Consul backend, and discovery with its disk cache. switchboard restarts
// while the registry is down, routes on the cached view, and converges when
// the registry is back.
func TestRestartDuringARegistryOutageWithRealParts(t *testing.T) {
	dir := t.TempDir()
	srv := startRegistryd(t, "127.0.0.1:0")
	addr := srv.Addr()
	reg, err := consul.New(consul.Config{Address: addr, WaitTime: 10 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	opts := discovery.Options{Registry: "consul", CacheDir: dir, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: quiet()}
	q := registry.Query{Service: "web", PassingOnly: true}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	web := func(id string, port int) registry.Registration {
		return registry.Registration{Instance: registry.Instance{ID: id, Service: "web", Address: "127.0.0.1", Port: port}}
	}

	// First life.
	if err := reg.Register(ctx, web("web-1", 9001)); err != nil {
		t.Fatal(err)
	}
	d1, err := discovery.New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	v1 := d1.Watch(q)
	subscribe(t, v1).until(t, "web-1", func(s discovery.Snapshot) bool { return len(s.Instances) == 1 })
	v1.Close()
	d1.Close()

	// The registry goes down; switchboard restarts.
	srv.Close()
	d2, err := discovery.New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	v2 := d2.Watch(q)
	defer v2.Close()
	if err := v2.Ready(ctx); err != nil {
		t.Fatalf("Ready during the outage: %v", err)
	}
	snaps := subscribe(t, v2)
	s := snaps.until(t, "the cached view", func(discovery.Snapshot) bool { return true })
	if !s.FromCache || !s.Stale || !slices.Equal(ids(s.Instances), []string{"web-1"}) {
		t.Fatalf("during the outage: %+v; want web-1 from the cache, stale", s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := d2.Status(); len(st) != 1 || st[0].Errors == 0; st = d2.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("no registry error counted within 10s: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The registry is back (empty, as after a restart without data_dir),
	// and the instances register again.
	startRegistryd(t, addr)
	if err := reg.Register(ctx, web("web-1", 9001)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(ctx, web("web-2", 9002)); err != nil {
		t.Fatal(err)
	}
	s = snaps.until(t, "web-1 and web-2 from the registry", func(s discovery.Snapshot) bool {
		return !s.Stale && !s.FromCache && len(s.Instances) == 2
	})
	if !slices.Equal(ids(s.Instances), []string{"web-1", "web-2"}) || s.UpdatedAt.IsZero() {
		t.Fatalf("after the registry came back: %+v", s)
	}
}
