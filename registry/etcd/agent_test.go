package etcd

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-dev/switchboard/registry"
)

// TestAgentInstanceComesBackAfterEtcdIsWiped: a service registered through
// registry.Agent on an etcd Registry; etcd loses all its data and
// restarts; the instance is registered again without anyone calling
// anything, and Close still deregisters it.
func TestAgentInstanceComesBackAfterEtcdIsWiped(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newTestRegistry(t, srv.Addr(), logs)
	a, err := registry.NewAgent(r, reg(inst("orders-1", 9001), time.Second), registry.AgentOptions{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	const key = "/test/services/orders/orders-1"
	assertLive(t, srv.Addr(), key)

	srv.Stop()
	srv.Wipe(t)
	srv.Restart(t)

	// Watch the fresh etcd from its first revision: the instance's PUT is
	// the re-registration.
	raw := rawClient(t, srv.Addr())
	ctx := ctxFor(t, 15*time.Second)
	wch := raw.Watch(ctx, key, clientv3.WithRev(1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].Type == clientv3.EventTypePut {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the instance was not registered again within 15s of the wiped etcd's restart; log: %d lines", logs.count(""))
	}
	assertLive(t, srv.Addr(), key)

	if err := a.Close(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.Get(ctxFor(t, 5*time.Second), key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("key after the agent's Close: %v, %v; want it deleted", resp, err)
	}
}

// countingRegistrar passes Register through and counts the successes.
type countingRegistrar struct {
	registry.Registrar
	done chan struct{} // one send per successful Register
}

func (c countingRegistrar) Register(ctx context.Context, rg registry.Registration) error {
	err := c.Registrar.Register(ctx, rg)
	if err == nil {
		select {
		case c.done <- struct{}{}:
		case <-ctx.Done():
		}
	}
	return err
}

// TestAgentWithoutHeartbeatsPutsBackADeletedInstance: an Agent whose check
// is not a TTL check does not heartbeat; its periodic re-registration
// writes nothing while the instance's key is in place, and writes the key
// again when it was deleted behind its back.
func TestAgentWithoutHeartbeatsPutsBackADeletedInstance(t *testing.T) {
	srv := startEtcd(t)
	r := countingRegistrar{newTestRegistry(t, srv.Addr(), nil), make(chan struct{})}
	raw := rawClient(t, srv.Addr())
	const key = "/test/services/orders/orders-1"
	rg := registry.Registration{Instance: inst("orders-1", 9001), Check: registry.Check{HTTP: "http://10.0.0.1:9001/health"}}
	a, err := registry.NewAgent(r, rg, registry.AgentOptions{ReregisterInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 15*time.Second)
	registered := func(n int) {
		t.Helper()
		for i := range n {
			select {
			case <-r.done:
			case <-ctx.Done():
				t.Fatalf("%d of %d registrations within the deadline", i, n)
			}
		}
	}
	started := make(chan error, 1)
	go func() { started <- a.Start(context.Background()) }()
	registered(1)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	first, err := raw.Get(ctx, key)
	if err != nil || len(first.Kvs) != 1 {
		t.Fatalf("key after Start: %v, %v", first, err)
	}
	registered(3)
	again, err := raw.Get(ctx, key)
	if err != nil || len(again.Kvs) != 1 || again.Header.Revision != first.Header.Revision {
		t.Fatalf("after 3 unchanged re-registrations: %v, %v; want no write since revision %d", again, err, first.Header.Revision)
	}

	del, err := raw.Delete(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The first may have read the key before the delete; the second
	// started after it.
	registered(2)
	back, err := raw.Get(ctx, key)
	if err != nil || len(back.Kvs) != 1 || back.Kvs[0].ModRevision <= del.Header.Revision {
		t.Fatalf("key after the next re-registration: %v, %v; want it written again after the delete at revision %d", back, err, del.Header.Revision)
	}
	assertLive(t, srv.Addr(), key)
}
