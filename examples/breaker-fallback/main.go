// Command breaker-fallback shows a circuit breaker and a fallback chain in
// switchboard's Go client (package client): when the prices service fails,
// its calls are answered by the next step that can — a backup service, then
// the last good answer kept in a stale cache, then a static default — and
// every such answer carries X-Switchboard-Degraded, so the caller knows.
//
// It starts the prices service and its backup on loopback ports,
// in-process, breaks them one after the other, prints who answered each
// call, and exits 0 (1 if an answer is not the one expected).
//
//	go run ./examples/breaker-fallback
package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "breaker-fallback:", err)
		os.Exit(1)
	}
}

func run() error {
	// The prices service answers until it is told to fail with 500s.
	var failing atomic.Bool
	var primaryCalls atomic.Int64
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		primaryCalls.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s = 1.08 (live)", r.URL.Path)
	}))
	defer primary.Close()
	backup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s = 1.07 (backup region)", r.URL.Path)
	}))
	defer backup.Close()
	target := func(s *httptest.Server) []endpoint.Spec {
		return []endpoint.Spec{{Address: s.Listener.Addr().String()}}
	}

	// The route of the prices service: a breaker that opens after three
	// failures in a row, and a chain tried in order when the service
	// answers 500, when the breaker is open, or when no endpoint answers.
	c, err := client.New(
		client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		client.WithService("prices-backup", client.Service{Upstream: upstream.Config{Targets: target(backup)}}),
		client.WithService("prices", client.Service{
			Upstream: upstream.Config{Targets: target(primary)},
			Pipeline: pipeline.Config{
				Breaker: &breaker.Config{ConsecutiveFailures: 3, OpenFor: time.Minute},
				Fallback: &fallback.Config{
					On: []string{"breaker_open", "no_healthy_endpoint", "retries_exhausted", "status:500"},
					Steps: []fallback.StepConfig{
						{Type: fallback.StepBackup, Upstream: "prices-backup"},
						{Type: fallback.StepStale, MaxAge: 10 * time.Minute},
						{Type: fallback.StepStatic, Status: 200, Body: "price unavailable, try later",
							Headers: map[string]string{"Content-Type": "text/plain", "Cache-Control": "no-store"}},
					},
				},
			},
		}),
	)
	if err != nil {
		return err
	}
	defer c.Close()
	hc := c.HTTPClient()

	// call prints who answered, and checks it is who should have.
	call := func(path, wantBody, wantDegraded string) error {
		resp, err := hc.Get("http://prices" + path)
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close() // the call's outcome reaches the breaker here
		if err != nil {
			return err
		}
		reason, degraded := client.Degraded(resp)
		mark := "live"
		if degraded {
			mark = "degraded: " + reason
		}
		fmt.Printf("  GET %-9s %d %-36q [%s]\n", path, resp.StatusCode, strings.TrimSpace(string(body)), mark)
		if !strings.Contains(string(body), wantBody) || reason != wantDegraded {
			return fmt.Errorf("GET %s answered %q degraded %q; want %q degraded %q", path, body, reason, wantBody, wantDegraded)
		}
		return nil
	}

	fmt.Println("1. The prices service answers (and the answer is kept for the stale step):")
	if err := call("/eur", "(live)", ""); err != nil {
		return err
	}

	fmt.Println("\n2. It starts failing with 500s; the backup service answers in its place:")
	failing.Store(true)
	for i := 0; i < 3; i++ {
		if err := call("/eur", "(backup region)", "backup: status:500"); err != nil {
			return err
		}
	}

	fmt.Println("\n3. Three failures in a row opened the breaker: the prices service is not called at all:")
	before := primaryCalls.Load()
	if err := call("/eur", "(backup region)", "backup: breaker_open"); err != nil {
		return err
	}
	if n := primaryCalls.Load() - before; n != 0 {
		return fmt.Errorf("the prices service got %d calls with its breaker open", n)
	}

	fmt.Println("\n4. The backup goes down too: the stale cache answers with the last good price:")
	backup.CloseClientConnections()
	backup.Close()
	if err := call("/eur", "(live)", "stale: breaker_open"); err != nil {
		return err
	}

	fmt.Println("\n5. A price never seen before has no stale copy: the static default answers:")
	if err := call("/usd", "price unavailable", "static: breaker_open"); err != nil {
		return err
	}

	fmt.Println("\nEvery step answered in turn, and every fallback answer was marked degraded.")
	return nil
}
