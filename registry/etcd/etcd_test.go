package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-dev/switchboard/registry"
)

func TestRegisterPutsInstanceJSONUnderALeaseAndInstancesFindsIt(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())

	a := inst("orders-1", 9001, "v2", "canary")
	a.Weight, a.Zone, a.Meta = 3, "eu-1a", map[string]string{"build": "42"}
	mustRegister(t, r, reg(a, 5*time.Second))
	mustRegister(t, r, reg(inst("orders-2", 9002, "v2"), 0))
	mustRegister(t, r, registry.Registration{Instance: registry.Instance{ID: "pay-1", Service: "payments", Address: "10.0.0.2", Port: 80}})

	ctx := ctxFor(t, 5*time.Second)
	resp, err := raw.Get(ctx, "/test/services/orders/orders-1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get of the instance key = %v, %v; want one key", resp, err)
	}
	var got registry.Instance
	if err := json.Unmarshal(resp.Kvs[0].Value, &got); err != nil {
		t.Fatalf("value is not instance JSON: %v: %s", err, resp.Kvs[0].Value)
	}
	if got.ID != "orders-1" || got.Weight != 3 || got.Zone != "eu-1a" || got.Meta["build"] != "42" || !slices.Equal(got.Tags, []string{"v2", "canary"}) {
		t.Fatalf("stored instance = %+v, want %+v", got, a)
	}
	ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || ttl.GrantedTTL != 5 {
		t.Fatalf("lease of the key: granted TTL %v, %v; want 5s (Check.TTL)", ttl, err)
	}
	resp2, _ := raw.Get(ctx, "/test/services/orders/orders-2")
	ttl2, err := raw.TimeToLive(ctx, clientv3.LeaseID(resp2.Kvs[0].Lease))
	if err != nil || ttl2.GrantedTTL != 10 {
		t.Fatalf("lease of a registration without TTL: granted %v, %v; want the 10s default", ttl2, err)
	}

	all, err := r.Instances(ctx, registry.Query{Service: "orders"})
	if err != nil || ids(all) != "orders-1,orders-2" {
		t.Fatalf("Instances(orders) = [%s], %v; want [orders-1,orders-2]", ids(all), err)
	}
	canary, err := r.Instances(ctx, registry.Query{Service: "orders", Tags: []string{"canary"}})
	if err != nil || ids(canary) != "orders-1" {
		t.Fatalf("Instances(orders, canary) = [%s], %v; want [orders-1]", ids(canary), err)
	}
	none, err := r.Instances(ctx, registry.Query{Service: "order"})
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("Instances(order) = %#v, %v; want an empty non-nil slice (no prefix match on orders)", none, err)
	}
}

func TestRegisterRejectsBadRegistrationsAndWritesNothing(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	cases := []struct {
		name string
		reg  registry.Registration
		want string
	}{
		{"port", reg(inst("o-1", 0), time.Second), "instance.port: 0 is out of range"},
		{"id", reg(inst("", 1), time.Second), "instance.id: must not be empty"},
		{"slash", reg(inst("a/b", 1), time.Second), "instance.id: \"a/b\" must not contain '/'"},
		{"ttl", reg(inst("o-1", 1), 500*time.Millisecond), "check.ttl: 500ms is below 1s"},
	}
	for _, c := range cases {
		err := r.Register(ctxFor(t, 5*time.Second), c.reg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Register error = %v; want it to contain %q", c.name, err, c.want)
		}
	}
	resp, err := raw.Get(ctxFor(t, 5*time.Second), "/test/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under /test after rejected registrations: %v, %v; want 0", resp.Count, err)
	}
	leases, err := raw.Leases(ctxFor(t, 5*time.Second))
	if err != nil || len(leases.Leases) != 0 {
		t.Fatalf("leases after rejected registrations: %v, %v; want none", leases, err)
	}
}

func TestDeregisterRevokesTheLeaseAndDeletesTheKey(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	ctx := ctxFor(t, 5*time.Second)
	resp, _ := raw.Get(ctx, "/test/services/orders/orders-1")
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)

	if err := r.Deregister(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := raw.Get(ctx, "/test/services/orders/orders-1"); len(resp.Kvs) != 0 {
		t.Fatal("key still present after Deregister")
	}
	if ttl, err := raw.TimeToLive(ctx, lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("lease after Deregister: TTL %v, %v; want -1 (revoked)", ttl, err)
	}
	if err := r.Deregister(ctx, "never-registered"); err != nil {
		t.Fatalf("Deregister of an unknown ID = %v; want nil", err)
	}
	if err := r.Heartbeat(ctx, "orders-1"); !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("Heartbeat after Deregister = %v; want ErrNotRegistered", err)
	}
}

func TestRegisterAgainReplacesWithoutAGap(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	ctx := ctxFor(t, 10*time.Second)
	before, _ := raw.Get(ctx, "/test/services/orders/orders-1")
	wch := raw.Watch(ctx, "/test/services/orders/", clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1))

	mustRegister(t, r, reg(inst("orders-1", 9002), 5*time.Second))

	resp := <-wch
	if len(resp.Events) != 1 || resp.Events[0].Type != clientv3.EventTypePut {
		t.Fatalf("re-registering produced events %v; want one PUT and no DELETE", resp.Events)
	}
	after, _ := raw.Get(ctx, "/test/services/orders/orders-1")
	if !strings.Contains(string(after.Kvs[0].Value), `"port":9002`) {
		t.Fatalf("value after re-register = %s; want port 9002", after.Kvs[0].Value)
	}
	if ttl, _ := raw.TimeToLive(ctx, clientv3.LeaseID(before.Kvs[0].Lease)); ttl.TTL != -1 {
		t.Fatalf("the replaced lease is still alive (TTL %d); want it revoked", ttl.TTL)
	}
}

// An unchanged re-registration (what a registry.Agent without heartbeats
// does every ReregisterInterval) writes nothing while the key is in place,
// and writes the key again when it is not.
func TestRegisterAgainUnchangedWritesNothingUnlessTheKeyIsGone(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	const key = "/test/services/orders/orders-1"
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	ctx := ctxFor(t, 10*time.Second)
	before, err := raw.Get(ctx, key)
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("key after Register: %v, %v", before, err)
	}
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	after, err := raw.Get(ctx, key)
	if err != nil || len(after.Kvs) != 1 || after.Kvs[0].ModRevision != before.Kvs[0].ModRevision ||
		after.Kvs[0].Lease != before.Kvs[0].Lease || after.Header.Revision != before.Header.Revision {
		t.Fatalf("after an unchanged re-registration: %v, %v; want no write (revision %d, lease %x)",
			after, err, before.Header.Revision, before.Kvs[0].Lease)
	}

	if _, err := raw.Delete(ctx, key); err != nil { // by hand, lease still alive
		t.Fatal(err)
	}
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	assertLive(t, srv.Addr(), key)
}

func TestHeartbeatRenewsAndReportsALostLease(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newTestRegistry(t, srv.Addr(), logs)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001), 5*time.Second))
	ctx := ctxFor(t, 10*time.Second)
	if err := r.Heartbeat(ctx, "orders-1"); err != nil {
		t.Fatalf("Heartbeat of a live registration = %v", err)
	}
	if err := r.Heartbeat(ctx, "nope"); !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("Heartbeat of an unknown ID = %v; want ErrNotRegistered", err)
	}

	// Someone revokes our lease behind our back: the key goes with it.
	resp, _ := raw.Get(ctx, "/test/services/orders/orders-1")
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	err := r.Heartbeat(ctx, "orders-1")
	if !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("Heartbeat after the lease was revoked = %v; want an error wrapping ErrNotRegistered", err)
	}
	// ...and the Registry puts it back by itself.
	logs.waitFor(t, "etcd: re-registered", 0, 5*time.Second)
	resp, err = raw.Get(ctx, "/test/services/orders/orders-1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key after re-registration: %v, %v", resp, err)
	}
	if err := r.Heartbeat(ctx, "orders-1"); err != nil {
		t.Fatalf("Heartbeat after re-registration = %v", err)
	}
}

func TestWatchYieldsWholeSnapshotsAndSkipsBadValues(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newTestRegistry(t, srv.Addr(), logs)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001, "v2"), 5*time.Second))

	w, err := r.Watch(context.Background(), registry.Query{Service: "orders", Tags: []string{"v2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1", 5*time.Second)

	ctx := ctxFor(t, 10*time.Second)
	if _, err := raw.Put(ctx, "/test/services/orders/garbage", "{not json"); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, reg(inst("orders-2", 9002, "v2"), 5*time.Second))
	snap := nextUntil(t, w, "orders-1,orders-2", 5*time.Second)
	if snap[1].Port != 9002 {
		t.Fatalf("snapshot = %+v", snap)
	}
	if n := logs.count("not valid JSON"); n != 1 {
		t.Fatalf("bad value logged %d times; want exactly once", n)
	}
	// An instance without the tag is not part of this query: no snapshot
	// for it. The next snapshot is the removal of orders-1.
	mustRegister(t, r, reg(inst("orders-3", 9003, "v1"), 5*time.Second))
	if err := r.Deregister(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	snap, err = w.Next(ctx)
	if err != nil || ids(snap) != "orders-2" {
		t.Fatalf("Next after adding an untagged instance and removing orders-1 = [%s], %v; want [orders-2]", ids(snap), err)
	}

	w.Stop()
	if _, err := w.Next(ctx); err == nil {
		t.Fatal("Next after Stop returned no error")
	}
}

// TestWatchLatency measures the time from a Put to the snapshot that
// contains it, over 200 changes.
func TestWatchLatency(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	w, err := r.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx := ctxFor(t, 60*time.Second)
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 200
	lat := make([]time.Duration, 0, n)
	for i := range n {
		v, _ := json.Marshal(registry.Instance{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 9000, Weight: i + 1})
		start := time.Now()
		if _, err := raw.Put(ctx, "/test/services/orders/orders-1", string(v)); err != nil {
			t.Fatal(err)
		}
		snap, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if len(snap) != 1 || snap[0].Weight != i+1 {
			t.Fatalf("change %d: snapshot %+v; want weight %d", i, snap, i+1)
		}
	}
	slices.Sort(lat)
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	t.Logf("etcd watch latency, Put to snapshot, %d changes: p50 %v, p99 %v, max %v", n, p50, p99, lat[n-1])
	if p99 > 100*time.Millisecond {
		t.Fatalf("p99 watch latency %v; want under 100ms", p99)
	}
}

// TestKilledProcessVanishesWithinTTL simulates a process that dies: its
// Registry (its own etcd client) stops renewing and never deregisters.
func TestKilledProcessVanishesWithinTTL(t *testing.T) {
	srv := startEtcd(t)
	watcherSide := newTestRegistry(t, srv.Addr(), nil)
	dying := newTestRegistry(t, srv.Addr(), nil)
	const ttl = time.Second
	mustRegister(t, dying, reg(inst("orders-1", 9001), ttl))
	mustRegister(t, watcherSide, reg(inst("orders-2", 9002), 10*time.Second))

	w, err := watcherSide.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1,orders-2", 5*time.Second)

	dying.Close() // the process is gone: no more keepalives, no revoke
	killed := time.Now()
	nextUntil(t, w, "orders-2", ttl+time.Second)
	t.Logf("instance of the dead process gone %v after it stopped renewing (TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
}

// TestRegistrationsAndWatchesSurviveEtcdRestart: etcd stops for longer
// than the TTL (so the leases' renewals lapse) and comes back with its
// data: the registration is re-established by itself, and the watch
// resumes and sees what changes afterwards.
func TestRegistrationsAndWatchesSurviveEtcdRestart(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	r := newTestRegistry(t, srv.Addr(), logs)
	other := newTestRegistry(t, srv.Addr(), nil)
	mustRegister(t, r, reg(inst("orders-1", 9001), time.Second))
	w, err := other.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1", 5*time.Second)

	srv.Stop()
	// Wait for the renewals to lapse: the Registry notices and starts
	// re-registering (and fails while etcd is down).
	logs.waitFor(t, "lease lost", 0, 10*time.Second)
	srv.Restart(t)

	logs.waitFor(t, "etcd: re-registered", 0, 15*time.Second)
	mustRegister(t, other, reg(inst("orders-2", 9002), 10*time.Second))
	nextUntil(t, w, "orders-1,orders-2", 15*time.Second)
	assertLive(t, srv.Addr(), "/test/services/orders/orders-1")
}

// TestRegistrationsComeBackAfterEtcdIsWiped: etcd restarts with an empty
// data directory: every key and lease is gone and revisions start over.
// The Registry re-registers by itself; a watcher that held revision N
// notices the history changed and re-lists instead of resuming at N+1 (it
// would miss everything until etcd's revision caught up with N, and keep
// showing an instance that no longer exists).
func TestRegistrationsComeBackAfterEtcdIsWiped(t *testing.T) {
	srv := startEtcd(t)
	logs := newLogRecorder()
	watchLogs := newLogRecorder()
	r := newTestRegistry(t, srv.Addr(), logs)
	other := newTestRegistry(t, srv.Addr(), watchLogs)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001), 2*time.Second))
	// A key that the wipe loses for good (nobody re-registers it).
	v, _ := json.Marshal(inst("orders-0", 9000))
	if _, err := raw.Put(ctxFor(t, 5*time.Second), "/test/services/orders/orders-0", string(v)); err != nil {
		t.Fatal(err)
	}
	w, err := other.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-0,orders-1", 5*time.Second)

	srv.Stop()
	srv.Wipe(t)
	srv.Restart(t)

	// The keeper finds its lease unknown (etcd answers keepalives with
	// TTL 0) and registers again by itself.
	logs.waitFor(t, "etcd: re-registered", 0, 15*time.Second)
	assertLive(t, srv.Addr(), "/test/services/orders/orders-1")
	nextUntil(t, w, "orders-1", 15*time.Second)
	if watchLogs.count("re-listing") == 0 {
		t.Fatal("the watcher converged without re-listing; want the reconnect check to have re-listed")
	}
	mustRegister(t, other, reg(inst("orders-2", 9002), 10*time.Second))
	nextUntil(t, w, "orders-1,orders-2", 10*time.Second)
}

// TestWatchRelistsAfterCompaction: the watcher's connection is cut while
// instances change and etcd compacts past the watcher's revision; when the
// connection is back the watch cannot resume (the history is gone) and the
// watcher re-lists and converges.
func TestWatchRelistsAfterCompaction(t *testing.T) {
	srv := startEtcd(t)
	proxy := startCutProxy(t, srv.Addr())
	logs := newLogRecorder()
	behind := newTestRegistry(t, proxy.Addr(), logs)
	r := newTestRegistry(t, srv.Addr(), nil)
	raw := rawClient(t, srv.Addr())
	mustRegister(t, r, reg(inst("orders-1", 9001), 10*time.Second))
	mustRegister(t, r, reg(inst("orders-2", 9002), 10*time.Second))
	w, err := behind.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1,orders-2", 5*time.Second)

	proxy.setCut(true)
	ctx := ctxFor(t, 20*time.Second)
	if err := r.Deregister(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, reg(inst("orders-3", 9003), 10*time.Second))
	for i := range 5 { // history the watcher never saw
		if _, err := raw.Put(ctx, "/test/other", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := raw.Put(ctx, "/test/other", "last")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	proxy.setCut(false)

	nextUntil(t, w, "orders-2,orders-3", 15*time.Second)
	if logs.count("re-listing") == 0 {
		t.Fatal("converged without a re-list after compaction")
	}
}

// TestWatchResumesAfterADisconnectWithoutRelisting: a short cut with the
// history intact resumes the watch from the last revision.
func TestWatchResumesAfterADisconnectWithoutRelisting(t *testing.T) {
	srv := startEtcd(t)
	proxy := startCutProxy(t, srv.Addr())
	logs := newLogRecorder()
	behind := newTestRegistry(t, proxy.Addr(), logs)
	r := newTestRegistry(t, srv.Addr(), nil)
	mustRegister(t, r, reg(inst("orders-1", 9001), 10*time.Second))
	w, err := behind.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1", 5*time.Second)

	proxy.setCut(true)
	mustRegister(t, r, reg(inst("orders-2", 9002), 10*time.Second))
	proxy.setCut(false)
	nextUntil(t, w, "orders-1,orders-2", 15*time.Second)
	if n := logs.count("re-listing"); n != 0 {
		t.Fatalf("re-listed %d times after a disconnect with intact history; want a resume", n)
	}
}

func TestWatchAndInstancesRejectABadQuery(t *testing.T) {
	r, err := New(Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Watch(context.Background(), registry.Query{}); err == nil || !strings.Contains(err.Error(), "service: must not be empty") {
		t.Fatalf("Watch(empty service) = %v", err)
	}
	if _, err := r.Instances(context.Background(), registry.Query{Service: "a/b"}); err == nil || !strings.Contains(err.Error(), "service:") {
		t.Fatalf("Instances(a/b) = %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "endpoints: at least one"},
		{Config{Endpoints: []string{""}}, "endpoints[0]: must not be empty"},
		{Config{Endpoints: []string{"x:1"}, RequestTimeout: -1}, "request_timeout"},
		{Config{Endpoints: []string{"x:1"}, Password: "p"}, "username: required"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v; want an error containing %q", c.cfg, err, c.want)
		}
	}
}

func TestBackoffGrowsAndStaysWithinBounds(t *testing.T) {
	for n := 1; n < 40; n++ {
		d := min(retryMax, retryBase<<min(n-1, 15))
		for range 50 {
			got := backoff(n)
			if got < d/2 || got >= d {
				t.Fatalf("backoff(%d) = %v; want in [%v, %v)", n, got, d/2, d)
			}
		}
	}
}

// assertLive fails unless key exists and is attached to a live lease.
func assertLive(t *testing.T, addr, key string) {
	t.Helper()
	raw := rawClient(t, addr)
	ctx := ctxFor(t, 5*time.Second)
	resp, err := raw.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%s: %v, %v; want the key", key, resp, err)
	}
	ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	// TTL counts whole seconds left: 0 is a live 1s lease between
	// renewals, -1 a lease that is gone.
	if err != nil || ttl.TTL < 0 || ttl.GrantedTTL <= 0 {
		t.Fatalf("%s: lease %x: TTL %d granted %d, %v; want a live lease", key, resp.Kvs[0].Lease, ttl.TTL, ttl.GrantedTTL, err)
	}
}

// TestWatchRelistsWhenEtcdComesBackWithAnotherHistory: while a watcher is
// cut off, etcd is wiped and restarted and, before the watcher is back,
// its revision has already passed the watcher's. Resuming would look
// fine to etcd; the watcher must notice that the keys at its revision are
// not the ones it holds, and re-list.
func TestWatchRelistsWhenEtcdComesBackWithAnotherHistory(t *testing.T) {
	srv := startEtcd(t)
	proxy := startCutProxy(t, srv.Addr())
	logs := newLogRecorder()
	behind := newTestRegistry(t, proxy.Addr(), logs)
	raw := rawClient(t, srv.Addr())
	ctx := ctxFor(t, 30*time.Second)
	put := func(key string, in registry.Instance) {
		t.Helper()
		v, _ := json.Marshal(in)
		if _, err := raw.Put(ctx, key, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	put("/test/services/orders/orders-0", inst("orders-0", 9000))
	put("/test/services/orders/orders-1", inst("orders-1", 9001))
	w, err := behind.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-0,orders-1", 5*time.Second)

	proxy.setCut(true)
	srv.Stop()
	srv.Wipe(t)
	srv.Restart(t)
	put("/test/services/orders/orders-2", inst("orders-2", 9002)) // revision 2
	for i := range 10 {                                           // well past the watcher's revision
		if _, err := raw.Put(ctx, "/test/other", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	proxy.setCut(false)

	nextUntil(t, w, "orders-2", 15*time.Second)
	if logs.count("keys at our revision differ") == 0 {
		t.Fatalf("converged without the key comparison re-listing; log count of re-listing: %d", logs.count("re-listing"))
	}
}

// TestWatchReportsAnOutageAndReturnsAtOnceWhenEtcdIsBack: while etcd is
// down Next returns an error (a caller's view turns stale) instead of
// blocking silently, and once etcd is back Next returns the unchanged
// instances at once (the view is current again) without waiting for a
// change.
func TestWatchReportsAnOutageAndReturnsAtOnceWhenEtcdIsBack(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	w, err := r.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustRegister(t, newTestRegistry(t, srv.Addr(), nil), reg(inst("orders-1", 9001), 60*time.Second))
	nextUntil(t, w, "orders-1", 5*time.Second)

	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := w.Next(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Next while etcd is down: %v (context: %v); want an error about the lost connection", err, ctx.Err())
	}
	srv.Restart(t)
	// Unchanged instances, returned as soon as etcd answers (errors in
	// between are the caller's retries while the client reconnects).
	nextUntil(t, w, "orders-1", 20*time.Second)
}
