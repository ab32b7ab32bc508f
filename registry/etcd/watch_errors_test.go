package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchboard-dev/switchboard/registry"
)

// The tests in this file pin registry.Watcher's contract on every error
// path of Next: the first successful Next after an error returns the
// current instances at once, changed or not. Regression: only the lost
// connection reset what the caller was known to have; after any other
// error (ctx ended, etcd canceled the watch, a re-list or the check after
// reconnecting failed) the next Next found the same instances and blocked,
// and the discovery cache kept calling its view stale.

// recoveredWithin bounds the Next that must return "at once".
const recoveredWithin = 2 * time.Second

// readerOnly is an etcd with authentication on, one instance under /test/,
// a Registry logged in as a user whose role may read /test/, and a root
// client to revoke and grant that permission.
type readerOnly struct {
	r    *Registry
	root *clientv3.Client
}

func startReaderOnly(t *testing.T) *readerOnly {
	t.Helper()
	srv := startEtcd(t)
	raw := rawClient(t, srv.Addr())
	ctx := ctxFor(t, 10*time.Second)
	v, _ := json.Marshal(inst("orders-1", 9001))
	if _, err := raw.Put(ctx, "/test/services/orders/orders-1", string(v)); err != nil {
		t.Fatal(err)
	}
	// etcd docs (authentication guide): a root user with the root role
	// must exist before auth enable.
	steps := []func() error{
		func() error { _, err := raw.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := raw.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := raw.RoleAdd(ctx, "reader"); return err },
		func() error { _, err := raw.UserAdd(ctx, "watcher", "watcher-pw"); return err },
		func() error { _, err := raw.UserGrantRole(ctx, "watcher", "reader"); return err },
		func() error { _, err := raw.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("setting up etcd auth, step %d: %v", i, err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Username: "root", Password: "root-pw",
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	ro := &readerOnly{root: root}
	ro.grant(t)
	ro.r, err = New(Config{
		Endpoints: []string{srv.Addr()}, Prefix: "/test", Username: "watcher", Password: "watcher-pw",
		DialTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.r.Close() })
	return ro
}

func (ro *readerOnly) grant(t *testing.T) {
	t.Helper()
	if _, err := ro.root.RoleGrantPermission(ctxFor(t, 5*time.Second), "reader", "/test/",
		clientv3.GetPrefixRangeEnd("/test/"), clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatal(err)
	}
}

// revoke takes the read permission away. etcd checks it on every read and
// on every new watch; a watch already running carries on.
func (ro *readerOnly) revoke(t *testing.T) {
	t.Helper()
	if _, err := ro.root.RoleRevokePermission(ctxFor(t, 5*time.Second), "reader", "/test/",
		clientv3.GetPrefixRangeEnd("/test/")); err != nil {
		t.Fatal(err)
	}
}

// watch starts a watch of orders and takes its first snapshot.
func (ro *readerOnly) watch(t *testing.T) *watcher {
	t.Helper()
	w, err := ro.r.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	nextUntil(t, w, "orders-1", 5*time.Second)
	return w.(*watcher)
}

// nextFails calls Next and fails unless it returns an error containing want.
func nextFails(t *testing.T, w registry.Watcher, want string) {
	t.Helper()
	snap, err := w.Next(ctxFor(t, 10*time.Second))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Next = [%s], %v; want an error containing %q", ids(snap), err, want)
	}
}

// nextAtOnce fails unless Next returns the unchanged orders-1 within
// recoveredWithin.
func nextAtOnce(t *testing.T, w registry.Watcher, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), recoveredWithin)
	defer cancel()
	snap, err := w.Next(ctx)
	if err != nil || ids(snap) != "orders-1" {
		t.Fatalf("first Next after %s = [%s], %v; want the unchanged [orders-1] within %v", after, ids(snap), err, recoveredWithin)
	}
}

func TestWatchFirstNextAfterCtxEndedReturnsAtOnce(t *testing.T) {
	srv := startEtcd(t)
	r := newTestRegistry(t, srv.Addr(), nil)
	mustRegister(t, r, reg(inst("orders-1", 9001), 10*time.Second))
	w, err := r.Watch(context.Background(), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nextUntil(t, w, "orders-1", 5*time.Second)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if snap, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with a 100ms ctx and nothing changing = [%s], %v; want context.DeadlineExceeded", ids(snap), err)
	}
	nextAtOnce(t, w, "the ctx error")
}

// etcd cancels a watch it refuses (here: permission denied; in a cluster
// also "no leader" under WithRequireLeader).
func TestWatchFirstNextAfterEtcdCanceledTheWatchReturnsAtOnce(t *testing.T) {
	ro := startReaderOnly(t)
	w := ro.watch(t)
	ro.revoke(t)
	// The running watch survives a revocation; a new one does not. Make
	// Next start a new one, as it does after a re-list.
	w.mu.Lock()
	w.stopWatch()
	w.mu.Unlock()
	nextFails(t, w, "permission denied")
	ro.grant(t)
	nextAtOnce(t, w, "etcd canceled the watch")
}

func TestWatchFirstNextAfterAFailedRelistReturnsAtOnce(t *testing.T) {
	ro := startReaderOnly(t)
	w := ro.watch(t)
	ro.revoke(t)
	// What a compaction past the watcher's revision does.
	w.mu.Lock()
	w.relist = true
	w.mu.Unlock()
	nextFails(t, w, "listing")
	ro.grant(t)
	nextAtOnce(t, w, "a failed re-list")
}

func TestWatchFirstNextAfterAFailedCheckAfterReconnectingReturnsAtOnce(t *testing.T) {
	ro := startReaderOnly(t)
	w := ro.watch(t)
	ro.revoke(t)
	// What a reconnection does.
	w.mu.Lock()
	w.verify = true
	w.mu.Unlock()
	nextFails(t, w, "after reconnecting")
	ro.grant(t)
	nextAtOnce(t, w, "a failed check after reconnecting")
}

// After etcd canceled the watch, the next Next reads before it returns, so
// that it does not call the view current while etcd still refuses.
func TestWatchAfterEtcdCanceledTheWatchNextFailsWhileEtcdStillRefuses(t *testing.T) {
	ro := startReaderOnly(t)
	w := ro.watch(t)
	ro.revoke(t)
	w.mu.Lock()
	w.stopWatch()
	w.mu.Unlock()
	nextFails(t, w, "permission denied")
	nextFails(t, w, "permission denied")
	ro.grant(t)
	nextAtOnce(t, w, "the permission was granted again")
}
