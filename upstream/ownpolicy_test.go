package upstream_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/upstream"
)

// byZone sends every request to the first ready endpoint in its zone, and
// has background work (it implements balance.Runner) so that the test can
// see the upstream start and stop it.
type byZone struct {
	zone    string
	set     atomic.Pointer[endpoint.Set]
	running chan struct{}
	stopped chan struct{}
}

func (b *byZone) Update(s *endpoint.Set) { b.set.Store(s) }

func (b *byZone) Pick(*balance.Info) (balance.Result, error) {
	for _, ep := range b.set.Load().Ready {
		if ep.Zone() == b.zone {
			ep.Acquire()
			return balance.Result{Endpoint: ep, Done: ep.DoneFunc()}, nil
		}
	}
	return balance.Result{}, balance.ErrNoEndpoint
}

func (b *byZone) Run(ctx context.Context) error {
	close(b.running)
	<-ctx.Done()
	close(b.stopped)
	return nil
}

var lastByZone atomic.Pointer[byZone]

func init() {
	balance.Register("test_by_zone", func(cfg balance.Config) (balance.Balancer, error) {
		if err := cfg.Unused(); err != nil {
			return nil, err
		}
		b := &byZone{zone: "eu-1", running: make(chan struct{}), stopped: make(chan struct{})}
		lastByZone.Store(b)
		return b, nil
	})
}

// TestARegisteredPolicyBalancesAnUpstream: an upstream.Config naming a
// policy a program registered is valid, picks through it, and runs and
// stops its background work as the built-in dynamic_weight's; a key the
// policy does not read is a field error under balance.
func TestARegisteredPolicyBalancesAnUpstream(t *testing.T) {
	cfg := upstream.Config{
		Balance: balance.Config{Policy: "test_by_zone"},
		Targets: []endpoint.Spec{{Address: "a:1", Zone: "us-1"}, {Address: "b:1", Zone: "eu-1"}, {Address: "c:1", Zone: "eu-1"}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	u, err := upstream.New("app", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := lastByZone.Load()
	select {
	case <-b.running:
	case <-time.After(10 * time.Second):
		t.Fatal("the policy's Run was not started")
	}
	for range 5 {
		r, err := u.Pick(&balance.Info{})
		if err != nil {
			t.Fatal(err)
		}
		r.Done(endpoint.Outcome{Status: 200})
		if r.Endpoint.Address() != "b:1" {
			t.Fatalf("picked %s, want b:1 (the first in eu-1)", r.Endpoint.Address())
		}
	}
	if u.Policy() != "test_by_zone" {
		t.Fatalf("Policy() = %q", u.Policy())
	}
	u.Close()
	select {
	case <-b.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the policy's Run")
	}

	cfg.Balance.SlowStart = time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "balance.slow_start: not used by test_by_zone") {
		t.Fatalf("Validate with slow_start = %v, want balance.slow_start: not used by test_by_zone", err)
	}
}
