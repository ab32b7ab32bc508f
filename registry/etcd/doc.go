// Package etcd is a registry backend on etcd v3: it registers instances
// under leases and discovers them with prefix reads and watches.
//
// Each instance is one key, <prefix>/services/<service>/<id>, whose value
// is the registry.Instance as JSON and which is attached to a lease of the
// registration's TTL. The Registry keeps every lease it granted alive, and
// when a lease is lost (etcd restarted with its data wiped, a partition
// longer than the TTL, the lease revoked by someone else) it grants a new
// one and puts the key again by itself, with exponential backoff and
// jitter, for as long as the registration exists. It never gives up:
// registries that stop after N retries strand a running service outside
// discovery until it is restarted (go-kratos/kratos issue #3883).
//
// A process that dies stops renewing its lease, and etcd deletes the key
// when the lease expires: within the TTL plus etcd's expiry check interval
// (500ms in etcd 3.4) of the last renewal.
//
// # The Python fleet's layout
//
// Discovery also reads the values Python services write for themselves,
// {"host": "10.0.0.7", "port": 8080}, at /services/<service>/<host>:<port>
// (a Registry with Prefix "/" reads that tree; the same keys may hold
// switchboard's own values beside them). Such an instance's ID is the
// key's last segment, host:port; it has the "weight", "tags", "meta" (any
// JSON values, non-strings kept as their JSON text) and "zone" the value
// carries, and other fields are ignored. It is healthy for as long as its
// key exists: a writer that puts it under a lease and keeps the lease
// alive vanishes when it dies; one without a lease stays until deleted. A
// value that is not such JSON, or lacks a host or a valid port, is skipped
// with a warning naming the key; it never fails a listing or a watch.
//
// Discovery is a prefix Get (Instances) or a prefix watch (Watch) that
// keeps the service's keys in memory from the Get's revision on and yields
// whole snapshots. The watch resumes from the revision it last saw after a
// disconnection, re-lists when that revision has been compacted away, and
// re-lists when etcd comes back with a different history (a wiped or
// restored data directory), which a plain resume would silently miss.
//
// Use one Registry per process: it holds one etcd client connection, which
// all registrations and watches share. Close it when done.
package etcd
