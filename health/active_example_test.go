package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
)

// A Monitor reports verdict changes; the integrator turns them into the
// endpoint's state. Here a backend fails three checks, then recovers.
func ExampleMonitor() {
	cfg := health.DefaultActiveConfig()
	cfg.Interval = 10 * time.Millisecond
	cfg.AllowFast = true // under 1s: a test's interval
	cfg.Timeout = 5 * time.Millisecond
	cfg.Jitter = new(0.0) // no jitter: the output's order is fixed

	results := []error{nil, errors.New("status 500"), errors.New("status 500"), errors.New("status 500"), nil, nil}
	checks := 0
	checker := health.CheckerFunc(func(ctx context.Context, addr string) error {
		if checks >= len(results) {
			return nil
		}
		checks++
		return results[checks-1]
	})

	done := make(chan struct{})
	onChange := func(ep *endpoint.Endpoint, healthy bool, reason string, now time.Time) {
		state := endpoint.Unhealthy
		if healthy {
			state = endpoint.Healthy
		}
		ep.SetStatus(state, reason, now) // and, in a pool, Refresh
		fmt.Printf("%s %s: %s\n", ep.Address(), state, reason)
		if healthy {
			close(done)
		}
	}

	m, _ := health.NewMonitor(cfg, onChange,
		health.WithChecker(checker),
		health.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	m.Sync([]*endpoint.Endpoint{endpoint.New(endpoint.Spec{Address: "10.0.0.7:8080"})})
	m.Start(context.Background())
	<-done
	m.Close()
	// Output:
	// 10.0.0.7:8080 unhealthy: 3 consecutive health check failures: status 500
	// 10.0.0.7:8080 healthy: 2 consecutive health check passes
}
