package health_test

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
)

// Passive health on its own: the Detector sets endpoint states through
// ApplyTo, and the pool's snapshot loses the ejected endpoint.
func ExampleDetector() {
	pool := endpoint.NewPool("orders")
	pool.Update([]endpoint.Spec{{Address: "10.0.0.1:80"}, {Address: "10.0.0.2:80"}, {Address: "10.0.0.3:80"}})

	now := time.Date(2026, 11, 30, 3, 0, 12, 0, time.UTC)
	d, err := health.NewDetector(health.PassiveConfig{ConsecutiveFailures: 5},
		health.WithDetectorClock(func() time.Time { return now }),
		health.WithDetectorOnChange(func(ep *endpoint.Endpoint, s endpoint.State, reason string, at time.Time) {
			fmt.Printf("%s: %s\n", ep.Address(), reason)
			health.ApplyTo(pool)(ep, s, reason, at)
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	pool.Subscribe(func(s *endpoint.Set) { d.Update(s.All) })
	for _, ep := range pool.Snapshot().All {
		ep.SetObserver(d) // every released pick now reaches d.Observe
	}

	dead := pool.Snapshot().All[0]
	for range 5 {
		dead.Acquire()
		dead.Release(endpoint.Outcome{Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}})
	}
	fmt.Println("ready:", len(pool.Snapshot().Ready))

	now = now.Add(30 * time.Second)
	d.Tick(now) // the integrator calls Tick every second or so
	for range 2 {
		dead.Acquire()
		dead.Release(endpoint.Outcome{Status: 200})
	}
	fmt.Println("ready:", len(pool.Snapshot().Ready))
	// Output:
	// 10.0.0.1:80: ejected: 5 consecutive failures (last: connection reset) at 03:00:12, until 03:00:42
	// ready: 2
	// 10.0.0.1:80: probation: ejection time over
	// 10.0.0.1:80: healthy: 2 successes on probation
	// ready: 3
}
