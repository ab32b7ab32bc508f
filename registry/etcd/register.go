package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/registry"
)

// keeper owns one registration: it keeps its lease alive and, when the
// lease is lost, grants a new one and puts the key again, forever, until
// its context ends (Deregister, a replacing Register, Close).
type keeper struct {
	r     *Registry
	id    string
	key   string
	value []byte
	ttl   int64 // requested, whole seconds

	// lease is the live lease, 0 while the keeper is re-registering.
	lease  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	// lost receives a lease that Heartbeat found gone, so that the
	// keeper re-registers without waiting for its own keepalive to notice.
	// Pokes about an older lease are ignored.
	lost chan clientv3.LeaseID
}

// ttlSeconds turns a Check.TTL into etcd's whole seconds.
func ttlSeconds(ttl time.Duration) (int64, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < MinTTL {
		return 0, fmt.Errorf("check.ttl: %v is below %v, the shortest etcd lease", ttl, MinTTL)
	}
	return int64((ttl + time.Second - 1) / time.Second), nil
}

// validateRegistration checks what etcd needs beyond Instance.Validate: the
// service and ID become key segments.
func validateRegistration(reg registry.Registration) (int64, error) {
	inst := reg.Instance
	if err := inst.Validate(); err != nil {
		return 0, fmt.Errorf("instance.%w", err)
	}
	if strings.Contains(inst.Service, "/") {
		return 0, fmt.Errorf("instance.service: %q must not contain '/' (it is a key segment)", inst.Service)
	}
	if strings.Contains(inst.ID, "/") {
		return 0, fmt.Errorf("instance.id: %q must not contain '/' (it is a key segment)", inst.ID)
	}
	return ttlSeconds(reg.Check.TTL)
}

// Register puts the instance under a new lease of the registration's
// Check.TTL (default 10s, at least 1s, rounded up to whole seconds; HTTP
// and TCP checks are ignored: etcd knows only leases) and keeps the lease
// alive in the background. Registering an ID again replaces the earlier
// registration without a gap in which the key is missing.
//
// Registering an ID again with the same instance and TTL, while its key is
// in etcd under the lease this Registry keeps alive, changes nothing (one
// read, no write: watchers see no event), as in Consul; a registry.Agent
// without heartbeats does that periodically. If the key is gone or differs
// (deleted by hand, etcd restored from a backup), it is written again.
//
// Register returns once the key is written. If it fails, nothing is
// registered and any earlier registration of the ID stays as it was.
func (r *Registry) Register(ctx context.Context, reg registry.Registration) error {
	id := reg.Instance.ID
	ttl, err := validateRegistration(reg)
	if err != nil {
		return fmt.Errorf("etcd: register %q: %w", id, err)
	}
	value, err := json.Marshal(reg.Instance)
	if err != nil {
		return fmt.Errorf("etcd: register %q: encoding instance: %w", id, err)
	}
	key := r.instanceKey(reg.Instance.Service, id)

	r.opMu.Lock()
	defer r.opMu.Unlock()
	if r.isClosed() {
		return errClosed
	}
	r.mu.Lock()
	old := r.regs[id]
	r.mu.Unlock()
	if old != nil && old.key == key && old.ttl == ttl && bytes.Equal(old.value, value) {
		if held := clientv3.LeaseID(old.lease.Load()); held != 0 {
			same, err := r.holds(ctx, key, value, held)
			if err != nil {
				return fmt.Errorf("etcd: register %q: reading the current registration: %w", id, err)
			}
			if same {
				return nil
			}
		}
	}
	// Grant first: if etcd is unreachable, the old registration (if any)
	// carries on untouched.
	lease, err := r.grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("etcd: register %q: %w", id, err)
	}
	var oldLease clientv3.LeaseID
	if old != nil {
		old.stop()
		oldLease = clientv3.LeaseID(old.lease.Load())
	}
	if err := r.put(ctx, key, value, lease); err != nil {
		r.revoke(lease)
		if old != nil {
			// Put the earlier registration back in charge; it renews
			// its lease or, if that is gone, re-registers itself.
			r.startKeeper(old.id, old.key, old.value, old.ttl, oldLease)
		}
		return fmt.Errorf("etcd: register %q: %w", id, err)
	}
	if err := r.startKeeper(id, key, value, ttl, lease); err != nil {
		r.revoke(lease)
		return err
	}
	if oldLease != 0 && oldLease != lease {
		// The key moved to the new lease; revoking the old one deletes
		// only an old key of another service name, if the ID had one.
		r.revoke(oldLease)
	}
	return nil
}

// holds reports whether key holds value under lease.
func (r *Registry) holds(ctx context.Context, key string, value []byte, lease clientv3.LeaseID) (bool, error) {
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	resp, err := r.cli.Get(rctx, key)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) == lease && bytes.Equal(resp.Kvs[0].Value, value), nil
}

// Deregister stops renewing the instance's lease, revokes it and deletes
// the key. An ID this Registry did not register is not an error (and is
// left alone). If etcd cannot be reached the error is returned, but the
// registration is gone from this Registry all the same: the key
// disappears when its lease expires.
func (r *Registry) Deregister(ctx context.Context, id string) error {
	r.opMu.Lock()
	defer r.opMu.Unlock()
	r.mu.Lock()
	k := r.regs[id]
	delete(r.regs, id)
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return errClosed
	}
	if k == nil {
		return nil
	}
	k.stop()
	var errs []error
	if lease := clientv3.LeaseID(k.lease.Load()); lease != 0 {
		rctx, cancel := r.reqCtx(ctx)
		_, err := r.cli.Revoke(rctx, lease)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, fmt.Errorf("revoking lease %x: %w", int64(lease), err))
		}
	}
	// The key may be under a lease we no longer hold (lost, then the
	// keeper was stopped mid re-registration): delete it explicitly.
	rctx, cancel := r.reqCtx(ctx)
	_, err := r.cli.Delete(rctx, k.key)
	cancel()
	if err != nil {
		errs = append(errs, fmt.Errorf("deleting %s: %w", k.key, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("etcd: deregister %q: %w", id, err)
	}
	return nil
}

// Heartbeat renews the registration's lease once, for callers that drive
// their own heartbeat loop (the Registry renews it in the background
// anyway). It returns an error wrapping registry.ErrNotRegistered when the
// ID is not registered here or its lease is gone; in the latter case the
// Registry is already re-registering it, and calling Register again is
// also fine.
func (r *Registry) Heartbeat(ctx context.Context, id string) error {
	r.mu.Lock()
	k := r.regs[id]
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return errClosed
	}
	if k == nil {
		return fmt.Errorf("etcd: heartbeat %q: %w", id, registry.ErrNotRegistered)
	}
	lease := clientv3.LeaseID(k.lease.Load())
	if lease == 0 {
		return fmt.Errorf("etcd: heartbeat %q: lease lost, re-registering: %w", id, registry.ErrNotRegistered)
	}
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	_, err := r.cli.KeepAliveOnce(rctx, lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		select {
		case k.lost <- lease:
		default:
		}
		return fmt.Errorf("etcd: heartbeat %q: lease %x not found: %w", id, int64(lease), registry.ErrNotRegistered)
	}
	if err != nil {
		return fmt.Errorf("etcd: heartbeat %q: %w", id, err)
	}
	return nil
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *Registry) grant(ctx context.Context, ttl int64) (clientv3.LeaseID, error) {
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	resp, err := r.cli.Grant(rctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("granting a %ds lease: %w", ttl, err)
	}
	return resp.ID, nil
}

func (r *Registry) put(ctx context.Context, key string, value []byte, lease clientv3.LeaseID) error {
	rctx, cancel := r.reqCtx(ctx)
	defer cancel()
	if _, err := r.cli.Put(rctx, key, string(value), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("putting %s: %w", key, err)
	}
	return nil
}

// revoke revokes a lease we no longer want, best effort: if it fails, the
// lease expires on its own.
func (r *Registry) revoke(lease clientv3.LeaseID) {
	ctx, cancel := r.reqCtx(context.Background())
	defer cancel()
	r.cli.Revoke(ctx, lease)
}

// startKeeper records a keeper in regs and starts its goroutine with a
// lease already holding the key (or 0 to make it register first). After
// Close it starts nothing and returns errClosed.
func (r *Registry) startKeeper(id, key string, value []byte, ttl int64, lease clientv3.LeaseID) error {
	ctx, cancel := context.WithCancel(r.ctx)
	k := &keeper{r: r, id: id, key: key, value: value, ttl: ttl,
		cancel: cancel, done: make(chan struct{}), lost: make(chan clientv3.LeaseID, 1)}
	k.lease.Store(int64(lease))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		cancel()
		return errClosed
	}
	r.regs[id] = k
	go k.run(ctx, lease)
	return nil
}

// stop ends the keeper's goroutine and waits for it. The lease stays
// until revoked or expired.
func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

func (k *keeper) run(ctx context.Context, lease clientv3.LeaseID) {
	defer close(k.done)
	log := k.r.log.With("id", k.id, "key", k.key)
	failures := 0
	var stale clientv3.LeaseID
	for {
		if lease == 0 {
			if failures > 0 {
				if clock.Sleep(ctx, backoff(failures)) != nil {
					return
				}
			}
			l, err := k.r.grant(ctx, k.ttl)
			if err == nil {
				if err = k.r.put(ctx, k.key, k.value, l); err != nil {
					k.r.revoke(l)
				}
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				log.Warn("etcd: re-registration failed; retrying", "attempt", failures, "error", err)
				continue
			}
			lease = l
			k.lease.Store(int64(lease)) // before the log line: Heartbeat may act on it
			log.Info("etcd: re-registered", "lease", fmt.Sprintf("%x", int64(l)), "attempts", failures+1)
			if stale != 0 {
				// The lease we gave up on may still exist (etcd kept
				// it through a restart, or only our renewals timed
				// out). The key has moved to the new lease, so revoking
				// the stale one cannot delete it; revoking before the
				// put could have, and watchers would have seen a flap.
				k.r.revoke(stale)
				stale = 0
			}
		}
		k.lease.Store(int64(lease))
		started := time.Now()
		reason := k.keepAlive(ctx, lease)
		if ctx.Err() != nil {
			return
		}
		k.lease.Store(0)
		// A lease that dies young counts as a failure, so that a server
		// that keeps dropping fresh leases is not hammered.
		if time.Since(started) < time.Duration(k.ttl)*time.Second {
			failures++
		} else {
			failures = 0
		}
		log.Warn("etcd: lease lost; re-registering", "lease", fmt.Sprintf("%x", int64(lease)), "reason", reason)
		stale = lease
		lease = 0
	}
}

// keepAlive renews lease until it is lost or ctx ends, and says why it
// stopped.
func (k *keeper) keepAlive(ctx context.Context, lease clientv3.LeaseID) string {
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := k.r.cli.KeepAlive(kctx, lease)
	if err != nil {
		return err.Error()
	}
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				// The client closes the channel when etcd answers that
				// the lease is gone, or when no renewal succeeded within
				// the TTL (etcd unreachable).
				return "keepalive ended: lease expired or etcd unreachable for the TTL"
			}
		case l := <-k.lost:
			if l == lease {
				return "heartbeat: lease not found"
			}
		case <-ctx.Done():
			return ctx.Err().Error()
		}
	}
}
