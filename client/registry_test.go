package client_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/consul"
	"github.com/switchboard-dev/switchboard/registryd"
)

// startRegistry starts the embedded registry on a loopback port and
// returns it with a Consul backend pointed at it. Its blocking queries
// wait up to 10 minutes and unchanged returns are paced at one a minute:
// nothing but a change wakes a watch within a test's time.
func startRegistry(t *testing.T) (*registryd.Server, *consul.Registry) {
	t.Helper()
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", NodeName: "test-node", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	reg, err := consul.New(consul.Config{Address: srv.Addr(), WaitTime: 10 * time.Minute, ChurnInterval: time.Minute, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return srv, reg
}

func register(t *testing.T, reg registry.Registrar, service, id string, b *backend) {
	t.Helper()
	host, port, _ := net.SplitHostPort(b.addr())
	p, _ := strconv.Atoi(port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reg.Register(ctx, registry.Registration{Instance: registry.Instance{ID: id, Service: service, Address: host, Port: p}}); err != nil {
		t.Fatal(err)
	}
}

// readyAddrs returns the addresses of the pool's serving endpoints.
func readyAddrs(p *endpoint.Pool) map[string]bool {
	out := map[string]bool{}
	for _, ep := range p.Snapshot().Ready {
		out[ep.Address()] = true
	}
	return out
}

// The registry goes down: the client keeps calling the instances it last
// knew, from the discovery cache, with no failed call.
func TestCallsGoOnThroughARegistryOutage(t *testing.T) {
	srv, reg := startRegistry(t)
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	register(t, reg, "orders", "orders-a", a)
	register(t, reg, "orders", "orders-b", b)
	c := newClient(t, client.WithRegistry("consul", reg),
		client.WithDiscoveryOptions(discovery.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}),
		client.WithService("orders", client.Service{}))
	up := c.Upstream("orders")
	endpointtest.WaitReady(t, up.Pool(), 2)
	hc := c.HTTPClient()
	for i := 0; i < 4; i++ {
		if st, _ := get(t, hc, "http://orders/"); st != 200 {
			t.Fatalf("before the outage: %d", st)
		}
	}

	stale := make(chan discovery.Snapshot, 64)
	cancel := up.Config().View.Subscribe(func(s discovery.Snapshot) {
		if s.Stale {
			select {
			case stale <- s:
			default:
			}
		}
	})
	defer cancel()
	srv.Close()
	select {
	case s := <-stale:
		if len(s.Instances) != 2 {
			t.Fatalf("the stale view holds %d instances, want the 2 last known", len(s.Instances))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the view did not notice the registry was down within 10s")
	}
	a0, b0 := a.hits.Load(), b.hits.Load()
	for i := 0; i < 20; i++ {
		if st, body := get(t, hc, "http://orders/"); st != 200 || (body != "a" && body != "b") {
			t.Fatalf("call %d during the outage: %d %q", i, st, body)
		}
	}
	if a.hits.Load() == a0 || b.hits.Load() == b0 {
		t.Fatalf("during the outage a got %d and b %d calls; both cached instances should serve", a.hits.Load()-a0, b.hits.Load()-b0)
	}
}

// A new instance registered while the client runs is called as soon as the
// registry's blocking query wakes with it: well before any poll (the
// query waits 10 minutes, unchanged returns are paced at a minute).
func TestANewRegistrationIsFollowedThroughTheWatch(t *testing.T) {
	_, reg := startRegistry(t)
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	register(t, reg, "orders", "orders-a", a)
	c := newClient(t, client.WithRegistry("consul", reg), client.WithService("orders", client.Service{}))
	pool := c.Upstream("orders").Pool()
	endpointtest.WaitReady(t, pool, 1)
	hc := c.HTTPClient()
	if st, body := get(t, hc, "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("before: %d %q", st, body)
	}

	arrived := make(chan time.Time, 1)
	cancel := pool.Subscribe(func(s *endpoint.Set) {
		for _, ep := range s.Ready {
			if ep.Address() == b.addr() {
				select {
				case arrived <- time.Now():
				default:
				}
			}
		}
	})
	defer cancel()
	t0 := time.Now()
	register(t, reg, "orders", "orders-b", b)
	select {
	case at := <-arrived:
		t.Logf("registration to endpoint in the pool: %v", at.Sub(t0))
	case <-time.After(10 * time.Second):
		t.Fatalf("the new instance did not reach the client within 10s (ready: %v)", readyAddrs(pool))
	}
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		_, body := get(t, hc, "http://orders/")
		seen[body] = true
	}
	if !seen["b"] {
		t.Fatalf("4 calls after the registration reached %v, want b among them", seen)
	}
}

// The embedded registry in the same process serves as well, through its
// Discoverer, with no HTTP in between.
func TestTheEmbeddedRegistryInProcess(t *testing.T) {
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", NodeName: "test-node", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a := newBackend(t, "a", nil)
	register(t, srv, "orders", "orders-a", a)
	c := newClient(t, client.WithRegistry("embedded", srv.Discoverer()), client.WithService("orders", client.Service{}))
	endpointtest.WaitReady(t, c.Upstream("orders").Pool(), 1)
	if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("%d %q", st, body)
	}
}
