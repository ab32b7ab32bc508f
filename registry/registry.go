// Package registry defines what switchboard knows about a service instance
// and the small role interfaces every registry backend implements: a
// Registrar puts an instance into a registry and keeps it alive, a
// Discoverer lists a service's instances and watches them.
//
// Backends live in subpackages: registry/consul, registry/etcd,
// registry/dns and registry/static; the embedded registry (registryd)
// implements Discoverer in process. The discovery package builds a cached,
// outage-proof view over any Discoverer.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Health is a registry's verdict on an instance, in Consul's words.
type Health string

const (
	Passing  Health = "passing"
	Warning  Health = "warning"
	Critical Health = "critical"
)

// Instance is one registered instance of a service. Discoverers return
// instances by value; callers must not modify the Tags or Meta they share.
type Instance struct {
	ID      string            `json:"id"`
	Service string            `json:"service"`
	Address string            `json:"address"`
	Port    int               `json:"port"`
	Tags    []string          `json:"tags,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	// Weight is the relative share of traffic; 0 means 1.
	Weight int `json:"weight,omitempty"`
	// Zone is the instance's locality (Consul: Meta["zone"]).
	Zone string `json:"zone,omitempty"`
	// Health is the registry's aggregate verdict; "" means passing.
	Health Health `json:"health,omitempty"`
}

// HostPort is the instance's dial address.
func (i Instance) HostPort() string { return net.JoinHostPort(i.Address, strconv.Itoa(i.Port)) }

// EffectiveWeight is Weight, or 1 when unset.
func (i Instance) EffectiveWeight() int {
	if i.Weight < 1 {
		return 1
	}
	return i.Weight
}

// Validate reports the first field that makes the instance unusable.
func (i Instance) Validate() error {
	switch {
	case i.Service == "":
		return errors.New("service: must not be empty")
	case i.ID == "":
		return errors.New("id: must not be empty")
	case i.Address == "":
		return errors.New("address: must not be empty")
	case i.Port < 1 || i.Port > 65535:
		return fmt.Errorf("port: %d is out of range 1-65535", i.Port)
	case i.Weight < 0:
		return fmt.Errorf("weight: %d must not be negative", i.Weight)
	}
	switch i.Health {
	case "", Passing, Warning, Critical:
	default:
		return fmt.Errorf("health: %q is not passing, warning or critical", i.Health)
	}
	return nil
}

// HasTags reports whether the instance carries every tag in want.
func (i Instance) HasTags(want []string) bool {
	for _, w := range want {
		found := false
		for _, t := range i.Tags {
			if t == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Check describes how a registry decides that a registered instance is
// alive. Exactly one of TTL, HTTP and TCP is set; backends that only know
// leases (etcd) use TTL and ignore the rest.
type Check struct {
	// TTL: the instance must heartbeat within TTL or turn critical.
	TTL time.Duration
	// HTTP is a URL the registry GETs; 2xx is passing.
	HTTP string
	// TCP is a host:port the registry connects to.
	TCP string
	// Interval and Timeout apply to HTTP and TCP checks.
	Interval time.Duration
	Timeout  time.Duration
	// DeregisterCriticalAfter removes an instance that stays critical this
	// long (0: never).
	DeregisterCriticalAfter time.Duration
}

// Registration is what a Registrar stores.
type Registration struct {
	Instance Instance
	Check    Check
}

// ErrNotRegistered is wrapped by Heartbeat when the registry no longer knows
// the registration (its lease or TTL lapsed, the registry restarted, someone
// deregistered it). The caller registers again.
var ErrNotRegistered = errors.New("registration is not known to the registry")

// Registrar registers and deregisters instances.
type Registrar interface {
	// Register stores the registration, replacing one with the same ID.
	Register(ctx context.Context, r Registration) error
	// Deregister removes the instance; removing an unknown ID is not an
	// error.
	Deregister(ctx context.Context, id string) error
}

// Heartbeater is implemented by registrars whose registrations expire
// unless renewed (TTL checks, leases).
type Heartbeater interface {
	// Heartbeat renews the registration with this ID. It returns an error
	// wrapping ErrNotRegistered when the registration is gone.
	Heartbeat(ctx context.Context, id string) error
}

// Query selects the instances of one service.
type Query struct {
	Service string
	// Tags: an instance must carry every one.
	Tags []string
	// PassingOnly drops instances whose health is not passing. The proxy
	// sets it; backends that know no health ignore it.
	PassingOnly bool
}

// Key is a stable string for the query, for maps and file names.
func (q Query) Key() string {
	k := q.Service
	for _, t := range q.Tags {
		k += "," + t
	}
	if q.PassingOnly {
		k += ";passing"
	}
	return k
}

// Discoverer lists and watches a service's instances.
type Discoverer interface {
	// Instances returns the service's current instances (an empty, non-nil
	// slice for a service with none).
	Instances(ctx context.Context, q Query) ([]Instance, error)
	// Watch starts a watch. The first Next returns the current instances;
	// each later Next blocks until they change and returns the whole new
	// set (snapshots, never deltas).
	Watch(ctx context.Context, q Query) (Watcher, error)
}

// Watcher yields successive snapshots of one query.
type Watcher interface {
	// Next blocks until there is a snapshot the caller has not seen, ctx
	// ends, or the registry fails. After an error the caller may call Next
	// again (after a backoff); the watcher resumes from what it last saw
	// (Consul index, etcd revision) and re-lists when it cannot. The first
	// successful Next after an error returns at once with the current
	// instances, changed or not, so the caller learns that the registry
	// answers again (and stops calling its view stale). A watcher whose
	// registry becomes unreachable returns an error within a bounded time
	// rather than blocking silently.
	Next(ctx context.Context) ([]Instance, error)
	// Stop releases the watch's resources.
	Stop()
}
