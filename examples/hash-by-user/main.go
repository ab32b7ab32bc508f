// Command hash-by-user calls a service through switchboard's Go client
// (package client) with consistent hashing on a user id: every call for
// the same user lands on the same instance, so its cache stays warm. When
// an instance dies, only the users it served move; the others stay where
// they were.
//
// It starts three instances of a "profiles" service on loopback ports,
// in-process, and exits 0 once it has shown both, or 1 if a user moved
// when it should not have.
//
//	go run ./examples/hash-by-user
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/upstream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hash-by-user:", err)
		os.Exit(1)
	}
}

func run() error {
	// Three instances; each answers with its name.
	names := []string{"profiles-1", "profiles-2", "profiles-3"}
	servers := map[string]*httptest.Server{}
	var targets []endpoint.Spec
	for _, name := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, name)
		}))
		defer srv.Close()
		servers[name] = srv
		targets = append(targets, endpoint.Spec{Address: srv.Listener.Addr().String()})
	}

	// The client: http://profiles/... is balanced by consistent_hash. The
	// key is the X-User-Id header when a call carries one, or the key
	// client.WithHashKey puts in the call's context. A dead instance is
	// ejected after one failure, and the call that met it is tried again
	// on another instance (a GET is safe to send twice).
	c, err := client.New(
		client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		client.WithService("profiles", client.Service{Upstream: upstream.Config{
			Targets: targets,
			Balance: balance.Config{Policy: "consistent_hash", HashKey: "header:X-User-Id"},
			Health:  upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjection: time.Minute}},
		}}),
	)
	if err != nil {
		return err
	}
	defer c.Close()
	hc := c.HTTPClient()

	users := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	call := func(user string) (string, error) {
		ctx := client.WithHashKey(context.Background(), user)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://profiles/v1/profile", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body)), err
	}

	fmt.Println("Each user, three calls:")
	home := map[string]string{}
	for _, u := range users {
		var got []string
		for i := 0; i < 3; i++ {
			inst, err := call(u)
			if err != nil {
				return err
			}
			got = append(got, inst)
		}
		if got[0] != got[1] || got[1] != got[2] {
			return fmt.Errorf("user %s went to %v: the same user must land on one instance", u, got)
		}
		home[u] = got[0]
		fmt.Printf("  %-6s -> %s %s %s\n", u, got[0], got[1], got[2])
	}

	// Kill the instance that serves alice.
	victim := home["alice"]
	servers[victim].CloseClientConnections()
	servers[victim].Close()
	fmt.Printf("\n%s is killed. Each user, again:\n", victim)
	for _, u := range users {
		inst, err := call(u)
		if err != nil {
			return fmt.Errorf("user %s after %s died: %w", u, victim, err)
		}
		again, err := call(u)
		if err != nil {
			return err
		}
		switch {
		case inst != again:
			return fmt.Errorf("user %s went to %s and then %s after the kill", u, inst, again)
		case home[u] == victim && inst == victim:
			return fmt.Errorf("user %s is still sent to the dead %s", u, victim)
		case home[u] != victim && inst != home[u]:
			return fmt.Errorf("user %s moved from %s to %s, but %s is alive", u, home[u], inst, home[u])
		}
		note := "stays"
		if home[u] == victim {
			note = "moved from " + victim
		}
		fmt.Printf("  %-6s -> %s (%s)\n", u, inst, note)
	}
	fmt.Println("\nThe same user always lands on the same live instance; only the dead instance's users moved.")
	return nil
}
