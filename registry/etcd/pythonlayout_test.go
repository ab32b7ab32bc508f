package etcd

import (
	"context"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-dev/switchboard/registry"
)

// The Python fleet's layout: /services/<service>/<host>:<port> holding
// {"host": ..., "port": ...}, written here with the official etcd client,
// read by a Registry whose prefix is "/" (the layout has none).

func newRootRegistry(t *testing.T, addr string, logs *logRecorder) *Registry {
	t.Helper()
	return newTestRegistryAt(t, addr, "/", logs)
}

func mustPut(t *testing.T, c *clientv3.Client, key, value string, opts ...clientv3.OpOption) {
	t.Helper()
	if _, err := c.Put(ctxFor(t, 5*time.Second), key, value, opts...); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func TestPythonLayoutInstancesAreDiscoveredBesideOurOwn(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newRootRegistry(t, srv.Addr(), logs)
	raw := rawClient(t, srv.Addr())

	mustPut(t, raw, "/services/orders/10.0.0.7:8080", `{"host": "10.0.0.7", "port": 8080}`)
	mustPut(t, raw, "/services/orders/10.0.0.8:8081",
		`{"host": "10.0.0.8", "port": 8081, "weight": 3, "tags": ["v2"], "meta": {"version": "1.2", "shard": 7, "canary": false}, "pid": 4711}`)
	mustPut(t, raw, "/services/orders/10.0.0.9:8082", `{"host": "10.0.0.9"}`) // no port
	mustPut(t, raw, "/services/orders/10.0.0.10:8083", `{"host": "10.0.0.10", "port": 80`)
	mustPut(t, raw, "/services/payments/10.0.0.11:9000", `{"host": "10.0.0.11", "port": 9000}`)
	mustRegister(t, r, reg(registry.Instance{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 9001}, 5*time.Second))

	got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatalf("Instances with two malformed values beside good ones: %v; want the good ones", err)
	}
	want := []registry.Instance{
		{ID: "10.0.0.7:8080", Service: "orders", Address: "10.0.0.7", Port: 8080},
		{ID: "10.0.0.8:8081", Service: "orders", Address: "10.0.0.8", Port: 8081, Weight: 3, Tags: []string{"v2"},
			Meta: map[string]string{"version": "1.2", "shard": "7", "canary": "false"}},
		{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 9001},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Instances:\n got %+v\nwant %+v", got, want)
	}
	if n := logs.count("etcd: skipping an invalid instance key=/services/orders/10.0.0.9:8082 error=port: 0 is out of range"); n != 1 {
		t.Errorf("the value without a port was logged %d times naming its key; want once", n)
	}
	if n := logs.count("etcd: skipping an instance that is not valid JSON key=/services/orders/10.0.0.10:8083"); n != 1 {
		t.Errorf("the truncated value was logged %d times naming its key; want once", n)
	}
	tagged, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{Service: "orders", Tags: []string{"v2"}, PassingOnly: true})
	if err != nil || ids(tagged) != "10.0.0.8:8081" {
		t.Fatalf("Instances tagged v2, passing only = [%s], %v; want [10.0.0.8:8081] (healthy while its key exists)", ids(tagged), err)
	}
}

func TestPythonLayoutWatchSeesPutsUpdatesDeletesAndLeaseExpiry(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newRootRegistry(t, srv.Addr(), logs)
	raw := rawClient(t, srv.Addr())
	mustPut(t, raw, "/services/orders/10.0.0.7:8080", `{"host": "10.0.0.7", "port": 8080}`)

	w, err := r.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "10.0.0.7:8080", 5*time.Second)

	// A new instance, under a lease as a Python registrar that heartbeats
	// would write it.
	lease, err := raw.Grant(ctxFor(t, 5*time.Second), 30)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, raw, "/services/orders/10.0.0.8:8081", `{"host": "10.0.0.8", "port": 8081}`, clientv3.WithLease(lease.ID))
	nextUntil(t, w, "10.0.0.7:8080,10.0.0.8:8081", 5*time.Second)

	// An update of a value is seen as such.
	mustPut(t, raw, "/services/orders/10.0.0.7:8080", `{"host": "10.0.0.7", "port": 8080, "weight": 5}`)
	snap, err := w.Next(ctxFor(t, 5*time.Second))
	if err != nil || ids(snap) != "10.0.0.7:8080,10.0.0.8:8081" || snap[0].Weight != 5 {
		t.Fatalf("Next after the weight update = %+v, %v; want 10.0.0.7:8080 with weight 5", snap, err)
	}

	// A malformed value changes nothing (no snapshot); the next change is
	// the deletion, which removes its instance.
	mustPut(t, raw, "/services/orders/10.0.0.9:8082", `{"host": 12}`)
	if _, err := raw.Delete(ctxFor(t, 5*time.Second), "/services/orders/10.0.0.7:8080"); err != nil {
		t.Fatal(err)
	}
	snap, err = w.Next(ctxFor(t, 5*time.Second))
	if err != nil || ids(snap) != "10.0.0.8:8081" {
		t.Fatalf("Next after a malformed put and a delete = [%s], %v; want [10.0.0.8:8081]", ids(snap), err)
	}
	if n := logs.count("etcd: skipping an instance that is not valid JSON key=/services/orders/10.0.0.9:8082"); n != 1 {
		t.Errorf("the malformed value was logged %d times naming its key; want once", n)
	}

	// The lease ending (revoked here; expired when the writer dies) deletes
	// the key, and the instance goes with it.
	if _, err := raw.Revoke(ctxFor(t, 5*time.Second), lease.ID); err != nil {
		t.Fatal(err)
	}
	snap, err = w.Next(ctxFor(t, 5*time.Second))
	if err != nil || len(snap) != 0 {
		t.Fatalf("Next after the lease was revoked = [%s], %v; want no instances", ids(snap), err)
	}
}
