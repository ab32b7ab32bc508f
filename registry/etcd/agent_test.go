package etcd

import (
	"context"
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
