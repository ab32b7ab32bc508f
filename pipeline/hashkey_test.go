package pipeline_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestMissingHashKeyIsA400 pins missing_key: error through the attempt
// loop over real backends: a request without the key header is refused
// with 400 hash_key_missing before any endpoint is called, and the route's
// fallback chain does not answer it (the caller's mistake is not an
// outage); a request with the key reaches the backend.
func TestMissingHashKeyIsA400(t *testing.T) {
	hits := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Header.Get("X-User-Id")
	}))
	defer srv.Close()
	u, err := upstream.New("users", upstream.Config{
		Balance: balance.Config{Policy: balance.ConsistentHashName, HashKey: "header:X-User-Id", Hash: balance.HashMD5, MissingKey: balance.MissingKeyError},
		Targets: []endpoint.Spec{{Address: srv.Listener.Addr().String(), ID: "users-1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	r := newRoute(t, pipeline.Config{Fallback: &fallback.Config{Steps: []fallback.StepConfig{{Type: "static", Status: 200, Body: "degraded"}}}}, u, pipeline.HTTPTransport{})

	req, _ := http.NewRequest("GET", "http://users/profile", nil)
	c := &pipeline.Call{Req: req}
	resp, err := r.Do(c, time.Now())
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		t.Fatalf("a request without X-User-Id got %v, %v; want a *pipeline.Error", resp, err)
	}
	c.Finish(pe.Status, nil)
	if pe.Status != http.StatusBadRequest || pe.Code != pipeline.CodeHashKeyMissing || !errors.Is(err, balance.ErrNoHashKey) {
		t.Fatalf("got %d %s (%v), want 400 %s wrapping balance.ErrNoHashKey", pe.Status, pe.Code, err, pipeline.CodeHashKeyMissing)
	}
	if want := "upstream users needs a hash key (header:X-User-Id) and the request has none: balance: the request has no hash key"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if len(hits) != 0 {
		t.Fatalf("the backend was called for a request without a key")
	}

	req, _ = http.NewRequest("GET", "http://users/profile", nil)
	req.Header.Set("X-User-Id", "u-42")
	c = &pipeline.Call{Req: req}
	resp, err = r.Do(c, time.Now())
	if err != nil {
		t.Fatalf("a request with a key: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.Finish(resp.StatusCode, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchboard-Degraded") != "" {
		t.Fatalf("a request with a key got %d (degraded %q), want the backend's 200", resp.StatusCode, resp.Header.Get("X-Switchboard-Degraded"))
	}
	if got := <-hits; got != "u-42" {
		t.Fatalf("the backend saw key %q, want u-42", got)
	}
}

// A request refused for a missing hash key is the caller's mistake: it
// counts neither way for the route breaker, so it cannot close a half-open
// breaker as if it were a probe that succeeded.
func TestMissingHashKeyIsNoBreakerProbe(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError) // opens the breaker
		}
	}))
	defer srv.Close()
	u, err := upstream.New("users", upstream.Config{
		Balance: balance.Config{Policy: balance.ConsistentHashName, HashKey: "header:X-User-Id", Hash: balance.HashMD5, MissingKey: balance.MissingKeyError},
		Targets: []endpoint.Spec{{Address: srv.Listener.Addr().String(), ID: "users-1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	r := newRoute(t, pipeline.Config{Breaker: &breaker.Config{ConsecutiveFailures: 1, OpenFor: time.Second, HalfOpenProbes: 1}}, u, pipeline.HTTPTransport{})
	do := func(key string, now time.Time) (*pipeline.Call, int) {
		req, _ := http.NewRequest("GET", "http://users/profile", nil)
		if key != "" {
			req.Header.Set("X-User-Id", key)
		}
		c := &pipeline.Call{Req: req}
		resp, err := r.Do(c, now)
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *pipeline.Error", err)
			}
			return c, pe.Status
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, resp.StatusCode
	}
	t0 := time.Now()
	c, st := do("u-1", t0)
	c.Finish(st, nil)
	if st != http.StatusInternalServerError {
		t.Fatalf("first request: %d, want the backend's 500", st)
	}
	// Past open_for the breaker is half-open with one probe to give.
	later := t0.Add(2 * time.Second)
	c, st = do("", later)
	c.Finish(st, nil)
	if st != http.StatusBadRequest {
		t.Fatalf("keyless request: %d, want 400", st)
	}
	// Still half-open: the probe slot is free again and the next request
	// takes it; while it is out, another is refused.
	probe, st := do("u-1", later)
	if st != http.StatusOK {
		t.Fatalf("probe: %d, want 200", st)
	}
	c, st = do("u-2", later)
	c.Finish(st, nil)
	if st != http.StatusServiceUnavailable {
		t.Fatalf("a request while the probe is out: %d, want 503 breaker_open (the keyless request must not have closed the breaker)", st)
	}
	probe.Finish(http.StatusOK, nil)
}
