// Package balance holds the load-balancing policies. Each policy is a small
// type in its own file that exports a ...Name const and registers a Builder
// under that name; New builds one from a Config, and Config.Validate checks a
// configuration without keeping the result.
//
// A Balancer is fed immutable endpoint snapshots through Update and answers
// Pick from the latest one without taking a lock: Update builds the policy's
// whole pick state and publishes it behind an atomic pointer, as grpc-go's
// Picker does. Pick returns the endpoint and a Done callback that the caller
// must call exactly once with the outcome; it feeds in-flight counts, latency
// tracking, passive health and the breaker. Pick and Done allocate nothing.
//
// The policies: round_robin (the default), weighted_round_robin (nginx's
// smooth order), random, weighted_random, least_conn, p2c (two random
// choices on in-flight requests), p2c_ewma (two random choices on peak-EWMA
// latency), consistent_hash (a ring, optionally with bounded loads), maglev
// and dynamic_weight (weights from the endpoints' reported load).
// docs/balancing.md says when to use which.
//
// Most callers build a balancer with New, subscribe its Update to the pool,
// and per request call Pick (with Info.Key set when the policy hashes: see
// ParseHashKey) and then Done. A balancer that also implements Runner
// (dynamic_weight) wants Run in a goroutine of its own.
//
// consistent_hash with Config.Hash "md5" is the ring of the Python services
// our users run, point for point, so that mixed fleets send a key to the
// same node; with Config.MissingKey "error" a request without a key gets
// ErrNoHashKey. A program adds a policy of its own with Register (see
// Example_ownPolicy); every configuration that names it then works, the
// proxy's too when the program runs switchboard through package
// github.com/switchboard-dev/switchboard/cmd/switchboard/cli.
package balance

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
)

// ErrNoEndpoint is returned by Pick when the snapshot has no endpoint that
// can take traffic.
var ErrNoEndpoint = errors.New("balance: no endpoint available")

// Info is what a policy may use to choose. Callers reuse one Info per
// request; policies must not keep it.
type Info struct {
	// Key is the request's hash key for hashing policies ("" with HasKey
	// false when the request carries none). It may be borrowed from the
	// request, valid only during Pick: the HTTP proxy's event loop parses
	// a connection's next request over the memory of the last one. A
	// policy that keeps a key keeps a copy (strings.Clone).
	Key    string
	HasKey bool
	// Tried lists the endpoints already used for this request (retries). A
	// policy prefers an endpoint not in Tried whenever another one is ready.
	Tried []*endpoint.Endpoint
	// Prefer, when set, is the endpoint the request should go to if it
	// can (a sticky session). Policies do not read it: upstream.Pick
	// returns it, without asking the policy, while it is among the
	// endpoints the policy picks from and not in Tried.
	Prefer *endpoint.Endpoint
}

// Result is a pick.
type Result struct {
	Endpoint *endpoint.Endpoint
	// Done must be called exactly once with the outcome of using Endpoint.
	Done func(endpoint.Outcome)
}

// Balancer chooses an endpoint for each request.
type Balancer interface {
	// Pick chooses an endpoint from the latest snapshot. It is safe for
	// concurrent use, takes no lock and does not allocate.
	Pick(info *Info) (Result, error)
	// Update replaces the snapshot Pick chooses from.
	Update(set *endpoint.Set)
}

// Runner is implemented by balancers that do background work: dynamic_weight
// polls its endpoints' load and refreshes its weights. The balancer's owner
// runs Run in a goroutine of its own and cancels ctx to stop it; Run returns
// once its work has stopped. Balancers that are not Runners need no goroutine.
type Runner interface {
	Run(ctx context.Context) error
}

// Builder makes a Balancer from its configuration, or says why it cannot:
// every problem, as *field.Error values naming the keys, joined. A Builder
// starts no goroutine and holds no resource, so that Config.Validate can
// build and drop a balancer freely.
type Builder func(cfg Config) (Balancer, error)

var (
	regMu    sync.RWMutex
	registry = map[string]Builder{}
)

// Register makes a policy available under name: to New and Config.Validate,
// and so to every upstream (upstream.Config), the configuration file's
// balance.policy and the proxy, once a program has registered it. Register
// before building any configuration that names the policy: in an init func
// or at the top of main (docs/balancing.md, "Your own policy"). It panics
// on an empty or duplicate name or a nil Builder: registration is part of
// the program, and a clash is a programming error.
func Register(name string, b Builder) {
	if name == "" || b == nil {
		panic("balance: Register needs a name and a Builder")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("balance: policy registered twice: " + name)
	}
	registry[name] = b
}

// New builds the balancer named by cfg.Policy (DefaultPolicy when it is
// empty). Its error reports every problem of cfg, each as a *field.Error
// naming the key.
func New(cfg Config) (Balancer, error) {
	if cfg.Policy == "" {
		cfg.Policy = DefaultPolicy
	}
	regMu.RLock()
	b := registry[cfg.Policy]
	regMu.RUnlock()
	if b == nil {
		return nil, field.Errorf("policy", "%q is unknown (known: %s)", cfg.Policy, strings.Join(Policies(), ", "))
	}
	return b(cfg)
}

// Validate reports whether cfg names a registered policy with a valid
// configuration for it. The error is the one New would return: a
// *field.Error per problem, joined.
func (c Config) Validate() error {
	_, err := New(c)
	return err
}

// Policies lists the registered policy names, sorted.
func Policies() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Tried reports whether ep is in tried.
func Tried(tried []*endpoint.Endpoint, ep *endpoint.Endpoint) bool {
	for _, t := range tried {
		if t == ep {
			return true
		}
	}
	return false
}

// pick acquires ep and returns it with its prebuilt Done.
//
// Every policy ends its Pick here or in pickWith: the endpoint's in-flight
// count is what least_conn, p2c and bounded loads read.
func pick(ep *endpoint.Endpoint) Result {
	ep.Acquire()
	return Result{Endpoint: ep, Done: ep.DoneFunc()}
}

// pickWith acquires ep and returns it with done, a func prebuilt at Update
// time that ends in ep.Release.
func pickWith(ep *endpoint.Endpoint, done func(endpoint.Outcome)) Result {
	ep.Acquire()
	return Result{Endpoint: ep, Done: done}
}
