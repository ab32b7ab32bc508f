package registries

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
	etcdreg "github.com/switchboard-dev/switchboard/registry/etcd"
)

// BenchmarkChangeToRouting measures the time from a registry change (a
// registration returning) to the new instance being in an endpoint pool
// that a balancer picks from: the feed's subscriber is the same code path
// the proxy's upstreams use (pool.Update, which updates the balancer
// synchronously). It reports p50 and p99 in milliseconds:
//
//	go test ./internal/registries -run '^$' -bench ChangeToRouting -benchtime 200x
func BenchmarkChangeToRouting(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		srv := startEmbedded(b)
		c := consulClient(b, srv.Addr())
		measure(b, func(m *Manager) {
			m.SetEmbedded(srv.Discoverer())
			if err := m.Apply(parse(b, "registry: {listen: '127.0.0.1:0'}\n")); err != nil {
				b.Fatal(err)
			}
		}, config.EmbeddedRegistry, func(id string, port int) { registerConsul(b, c, id, port) })
	})
	b.Run("consul", func(b *testing.B) {
		// The consul backend's blocking queries over HTTP, against the
		// embedded registry's Consul API.
		srv := startEmbedded(b)
		c := consulClient(b, srv.Addr())
		measure(b, func(m *Manager) {
			if err := m.Apply(parse(b, fmt.Sprintf("registries:\n  c: {kind: consul, address: '%s'}\n", srv.Addr()))); err != nil {
				b.Fatal(err)
			}
		}, "c", func(id string, port int) { registerConsul(b, c, id, port) })
	})
	b.Run("etcd", func(b *testing.B) {
		etcd := testutil.StartEtcd(b)
		r, err := etcdreg.New(etcdreg.Config{Endpoints: []string{etcd.Addr()}, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		measure(b, func(m *Manager) {
			if err := m.Apply(parse(b, fmt.Sprintf("registries:\n  e: {kind: etcd, address: '%s'}\n", etcd.Addr()))); err != nil {
				b.Fatal(err)
			}
		}, "e", func(id string, port int) {
			err := r.Register(context.Background(), registry.Registration{
				Instance: registry.Instance{ID: id, Service: "orders", Address: "127.0.0.1", Port: port},
				Check:    registry.Check{TTL: time.Minute},
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	})
}

func measure(b *testing.B, setup func(*Manager), name string, register func(id string, port int)) {
	m := New(quiet(), prometheus.NewRegistry())
	defer m.Close()
	setup(m)
	f, err := m.Watch(name, registry.Query{Service: "orders", PassingOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	pool := endpoint.NewPool("orders")
	arrived := make(chan int, 1024)
	cancel := f.Subscribe(func(s discovery.Snapshot) {
		pool.Update(discovery.Specs(s.Instances))
		arrived <- len(pool.Snapshot().Ready)
	})
	defer cancel()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		register(fmt.Sprintf("i%d", i), 10000+i)
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case n := <-arrived:
				if n == i+1 {
					break wait
				}
			case <-deadline:
				b.Fatalf("instance %d did not arrive", i)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
