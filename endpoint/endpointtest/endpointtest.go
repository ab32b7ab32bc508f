// Package endpointtest helps tests of code that keeps an endpoint.Pool:
// wait, on the pool's own notifications rather than by polling, until its
// endpoints are in the state the test needs.
package endpointtest

import (
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// WaitReady waits, on the pool's own notifications, until exactly n of its
// endpoints are ready, and fails t after 15s.
func WaitReady(t testing.TB, p *endpoint.Pool, n int) {
	t.Helper()
	ch := make(chan int, 256)
	cancel := p.Subscribe(func(s *endpoint.Set) {
		select {
		case ch <- len(s.Ready):
		default:
		}
	})
	defer cancel()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("pool %s has %d ready endpoints, want %d", p.Name(), len(p.Snapshot().Ready), n)
		}
	}
}
