// Package registryd is switchboard's embedded service registry: a single
// node that speaks the subset of Consul's HTTP API v1 that service clients
// use (agent service register/deregister, TTL check updates, health and
// catalog queries with blocking index/wait), so that code written against
// Consul — the official Go client, python-consul, node-consul — registers
// and discovers against a laptop switchboard unchanged, and later against a
// real Consul cluster by changing only an address.
//
// A Server keeps its state in memory and, when Config.DataDir is set, in a
// JSON snapshot written atomically after changes, so registrations survive a
// restart. It runs HTTP and TCP checks itself, tracks TTL checks, and
// deregisters services that stay critical longer than their
// DeregisterCriticalServiceAfter.
//
// It is safe by default: it listens on loopback (127.0.0.1:8500), refuses a
// non-loopback address unless an ACL token is set (or Insecure), compares
// tokens in constant time, caps request bodies and rejects malformed
// registrations with a 400 that names the field, storing nothing.
//
// Go code in the same process uses the Server directly: Register,
// Deregister and Heartbeat implement registry.Registrar and
// registry.Heartbeater, Discoverer returns a registry.Discoverer with the
// same index and watch semantics as the HTTP API, and WatchServices feeds
// automatic routes.
//
// Every index the server hands out is at least 1 and never goes backwards
// for a given query; a change wakes only the watchers of the service that
// changed (one broadcast channel per service name, closed and replaced on
// each change).
package registryd
