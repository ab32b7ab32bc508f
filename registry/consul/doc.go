// Package consul is the Consul registry backend, on HashiCorp's official
// Go client (github.com/hashicorp/consul/api). It works against a Consul
// agent and against switchboard's embedded registry, which speaks the same
// HTTP API.
//
// A *Registry is a registry.Registrar (agent service registration with an
// HTTP, TCP or TTL check), a registry.Heartbeater (TTL check passes) and a
// registry.Discoverer (/v1/health/service with blocking queries).
//
// Watches follow Consul's "Blocking Queries" implementation notes
// (developer.hashicorp.com/consul/api-docs/features/blocking): an index that
// goes backwards resets the loop, an index below 1 is never sent, a return
// without a change emits nothing, and queries that keep returning without a
// change are rate limited by a token bucket with a burst of 2.
package consul
