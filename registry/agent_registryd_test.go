package registry_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registryd"
)

// TestAgentAgainstTheEmbeddedRegistry runs the agent against a real
// registry (the embedded one, in process): the instance is passing when
// Start returns, comes back by itself after someone deregisters it behind
// the agent's back, and is gone after Close.
func TestAgentAgainstTheEmbeddedRegistry(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := registry.Query{Service: "orders", PassingOnly: true}
	w, err := srv.Discoverer().Watch(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if in, err := w.Next(ctx); err != nil || len(in) != 0 {
		t.Fatalf("before the agent: %v, %v", in, err)
	}

	a, err := registry.NewAgent(srv, registry.Registration{
		Instance: registry.Instance{ID: "orders-1", Service: "orders", Address: "127.0.0.1", Port: 9001},
		Check:    registry.Check{TTL: 900 * time.Millisecond},
	}, registry.AgentOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if in, err := srv.Discoverer().Instances(ctx, q); err != nil || len(in) != 1 || in[0].ID != "orders-1" {
		t.Fatalf("passing instances when Start returned: %v, %v; want orders-1", in, err)
	}
	next := func(want int) {
		t.Helper()
		for {
			in, err := w.Next(ctx)
			if err != nil {
				t.Fatalf("waiting for %d passing instance(s): %v", want, err)
			}
			if len(in) == want {
				return
			}
		}
	}
	next(1)
	if err := srv.Deregister(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	next(0)
	next(1) // the next heartbeat finds it gone; the agent registers it again
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next(0)
}
