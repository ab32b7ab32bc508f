package consul

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

func ids(insts []registry.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	return out
}

func watchWeb(t *testing.T, r *Registry) registry.Watcher {
	t.Helper()
	w, err := r.Watch(context.Background(), registry.Query{Service: "web", Tags: []string{"v2"}, PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func mustNext(t *testing.T, w registry.Watcher) []registry.Instance {
	t.Helper()
	insts, err := w.Next(nextCtx(t))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return insts
}

// wantIndex checks the index (and wait) parameters of a request; "" means
// no index parameter: a non-blocking query.
func wantIndex(t *testing.T, s seen, index string) {
	t.Helper()
	if got := s.Query.Get("index"); got != index {
		t.Fatalf("request %s?%s: index=%q, want %q", s.Path, s.Query.Encode(), got, index)
	}
	if index != "" && s.Query.Get("wait") != "60000ms" {
		t.Fatalf("blocking request %s?%s: wait=%q, want 60000ms", s.Path, s.Query.Encode(), s.Query.Get("wait"))
	}
}

func TestWatchFirstNextListsTheServiceWithoutBlocking(t *testing.T) {
	rp := newReplay(t, step{index: "10", file: "web-two-passing.json"})
	r := newTestRegistry(t, rp.srv.URL, func(c *Config) { c.Datacenter = "dc1"; c.Token = "secret" })
	w := watchWeb(t, r)
	insts := mustNext(t, w)
	req := rp.request(t)
	if req.Method != "GET" || req.Path != "/v1/health/service/web" {
		t.Fatalf("request %s %s, want GET /v1/health/service/web", req.Method, req.Path)
	}
	wantIndex(t, req, "")
	if req.Query.Get("passing") != "1" || !slices.Equal(req.Query["tag"], []string{"v2"}) || req.Query.Get("dc") != "dc1" {
		t.Fatalf("query %s: want passing=1, tag=v2, dc=dc1", req.Query.Encode())
	}
	if req.Header.Get("X-Consul-Token") != "secret" {
		t.Fatalf("token header %q, want secret", req.Header.Get("X-Consul-Token"))
	}
	want := []registry.Instance{
		{ID: "web-1", Service: "web", Address: "10.1.10.100", Port: 8000, Tags: []string{"v2", "primary"},
			Meta: map[string]string{"zone": "eu-1", "version": "2.3"}, Weight: 10, Zone: "eu-1", Health: registry.Passing},
		// No service address: the node's.
		{ID: "web-2", Service: "web", Address: "10.1.10.13", Port: 8001, Tags: []string{"v2"},
			Meta: map[string]string{}, Weight: 1, Health: registry.Passing},
	}
	if !slices.EqualFunc(insts, want, sameInstance) {
		t.Fatalf("instances\n got %+v\nwant %+v", insts, want)
	}
}

func TestWatchBlocksOnTheLastIndex(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{index: "11", file: "web-one-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("second snapshot %v, want [web-1]", got)
	}
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "10")
}

func TestWatchSameIndexAfterTheWaitEmitsNothing(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{index: "10", file: "web-two-passing.json"}, // the wait ran out
		step{index: "10", file: "web-two-passing.json"}, // again
		step{index: "12", file: "web-one-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("the snapshot after two timed-out waits: %v, want [web-1]", got)
	}
	for i, want := range []string{"", "10", "10", "10"} {
		s := rp.request(t)
		if i > 0 {
			wantIndex(t, s, want)
		}
	}
	rp.noRequest(t)
}

func TestWatchNewIndexWithTheSameInstancesEmitsNothing(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{index: "11", file: "web-two-passing.json"},
		step{index: "12", file: "web-one-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("second snapshot %v, want [web-1]", got)
	}
	for _, want := range []string{"", "10", "11"} {
		wantIndex(t, rp.request(t), want)
	}
}

func TestWatchResetsWhenTheIndexGoesBackwards(t *testing.T) {
	rp := newReplay(t,
		step{index: "100", file: "web-two-passing.json"},
		step{index: "50", file: "web-two-passing.json"}, // e.g. a snapshot restore
		step{index: "50", file: "web-one-passing.json"},
		step{index: "51", file: "web-two-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("snapshot after the reset %v, want [web-1]", got)
	}
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "100")
	// Reset to 0, then raised to 1: the query returns the current state at
	// once.
	wantIndex(t, rp.request(t), "1")
	mustNext(t, w)
	wantIndex(t, rp.request(t), "50")
}

func TestWatchNeverSendsAnIndexBelowOne(t *testing.T) {
	rp := newReplay(t,
		step{index: "0", file: "web-two-passing.json"},
		step{index: "", file: "web-one-passing.json"}, // no header at all
		step{index: "7", file: "web-two-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	mustNext(t, w)
	mustNext(t, w)
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "1")
	// The missing header reads as 0: below the 1 sent, so a reset, and
	// the reset index is raised to 1 again.
	wantIndex(t, rp.request(t), "1")
}

func TestWatchErrorThenResumesWithTheLastIndex(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{status: 500, body: "rpc error making call: No cluster leader"},
		step{index: "11", file: "web-one-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	_, err := w.Next(nextCtx(t))
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "No cluster leader") || !strings.Contains(err.Error(), `watch "web,v2;passing"`) {
		t.Fatalf("Next on a 500: %v; want an error naming the query, the status and Consul's message", err)
	}
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("snapshot after the error %v, want [web-1]", got)
	}
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "10")
	// After an error the next query does not block: its answer tells the
	// caller at once that Consul answers again.
	wantIndex(t, rp.request(t), "")
	mustNextBlocks(t, rp, w, "11")
}

// TestWatchAfterAnErrorReturnsEvenWithoutAChange: the first answer after an
// error is returned although the instances are the same, so the discovery
// cache stops calling its view stale without waiting for a change.
func TestWatchAfterAnErrorReturnsEvenWithoutAChange(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{status: 500, body: "rpc error making call: No cluster leader"},
		step{index: "10", file: "web-two-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	first := ids(mustNext(t, w))
	if _, err := w.Next(nextCtx(t)); err == nil {
		t.Fatal("Next on a 500 did not fail")
	}
	if got := ids(mustNext(t, w)); !slices.Equal(got, first) {
		t.Fatalf("after the error: %v, want the unchanged %v", got, first)
	}
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "10")
	wantIndex(t, rp.request(t), "")
}

// Regression: when ctx ended while Next waited for a churn token, the error
// did not count as a failure, so the next Next blocked on the last index
// instead of returning the current instances at once.
func TestWatchAfterCtxEndedWaitingForAChurnTokenReturnsAtOnce(t *testing.T) {
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{index: "11", file: "web-two-passing.json"},
		step{index: "12", file: "web-two-passing.json"},
		step{index: "13", file: "web-two-passing.json"},
		step{index: "13", file: "web-two-passing.json"},
	)
	// ChurnInterval 1h: after the burst of 2, the wait for a token would
	// outlast any ctx deadline, and rate.Limiter.Wait fails at once.
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, func(c *Config) { c.ChurnInterval = time.Hour }))
	first := ids(mustNext(t, w))
	if _, err := w.Next(nextCtx(t)); err == nil || !strings.Contains(err.Error(), "context deadline") {
		t.Fatalf("Next that must wait an hour for a churn token = %v; want an error about the ctx deadline", err)
	}
	if got := ids(mustNext(t, w)); !slices.Equal(got, first) {
		t.Fatalf("first Next after the error = %v; want the unchanged %v", got, first)
	}
	for _, index := range []string{"", "10", "11", "12"} {
		wantIndex(t, rp.request(t), index)
	}
	wantIndex(t, rp.request(t), "") // after the error: no blocking
}

// mustNextBlocks checks that the watch goes back to blocking on index.
func mustNextBlocks(t *testing.T, rp *replay, w registry.Watcher, index string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Next(ctx)
	}()
	wantIndex(t, rp.request(t), index)
	cancel()
	<-done
}

func TestWatchChurnWithoutChangeIsRateLimited(t *testing.T) {
	const churn = 100 * time.Millisecond
	rp := newReplay(t, step{index: "10", file: "web-two-passing.json"})
	for i := 11; i <= 15; i++ {
		rp.add(step{index: fmt.Sprint(i), file: "web-two-passing.json"})
	}
	rp.add(step{index: "16", file: "web-one-passing.json"})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, func(c *Config) { c.ChurnInterval = churn }))
	mustNext(t, w)
	mustNext(t, w)
	var at []time.Time
	for range 7 {
		at = append(at, rp.request(t).At)
	}
	// Requests 1 and 2 bring data; the returns of 11 and 12 spend the burst
	// of 2, so 13 and 14 go at once; the returns of 13, 14 and 15 wait for
	// a token each (one per ChurnInterval).
	for i := 1; i < 4; i++ {
		if gap := at[i].Sub(at[i-1]); gap > churn/2 {
			t.Errorf("request %d came %v after the previous one; within the burst it should go at once", i+1, gap)
		}
	}
	for i := 4; i < 7; i++ {
		if gap := at[i].Sub(at[i-1]); gap < churn*8/10 {
			t.Errorf("request %d came %v after the previous one, want about %v (rate limited)", i+1, gap, churn)
		}
	}
}

func TestWatchDeliversAChangeWithoutWaitingForAChurnToken(t *testing.T) {
	// Two returns without a change spend the burst; the return that brings
	// a change is delivered at once (with ChurnInterval 1h, any wait for a
	// token would hang the test), and the next Next starts without waiting.
	rp := newReplay(t,
		step{index: "10", file: "web-two-passing.json"},
		step{index: "11", file: "web-two-passing.json"},
		step{index: "12", file: "web-two-passing.json"},
		step{index: "13", file: "web-one-passing.json"},
		step{index: "14", file: "web-two-passing.json"},
	)
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, func(c *Config) { c.ChurnInterval = time.Hour }))
	mustNext(t, w)
	mustNext(t, w)
	start := time.Now()
	mustNext(t, w)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a change after churn took %v", d)
	}
}

func TestStopEndsABlockedNext(t *testing.T) {
	rp := newReplay(t, step{index: "10", file: "web-two-passing.json"})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	mustNext(t, w)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Next(context.Background())
		errc <- err
	}()
	wantIndex(t, rp.request(t), "")
	wantIndex(t, rp.request(t), "10") // blocked in the server now
	w.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, errStopped) {
			t.Fatalf("Next after Stop: %v, want errStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return within 5s of Stop")
	}
}

func TestWatchGivesUpOnAStalledServer(t *testing.T) {
	rp := newReplay(t, step{index: "10", file: "web-two-passing.json"})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, func(c *Config) {
		c.WaitTime = 100 * time.Millisecond
		c.RequestTimeout = 50 * time.Millisecond
	}))
	mustNext(t, w)
	start := time.Now()
	_, err := w.Next(nextCtx(t))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next against a server that never answers: %v, want a deadline error", err)
	}
	// wait + wait/16 + request timeout = 156ms.
	if d := time.Since(start); d < 150*time.Millisecond || d > 3*time.Second {
		t.Fatalf("gave up after %v, want about 156ms", d)
	}
}

func TestResponsesOverTheSizeLimitAreRefused(t *testing.T) {
	big := "[" + strings.Repeat(" ", 5000) + "]"
	rp := newReplay(t, step{index: "10", body: big})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, func(c *Config) { c.MaxResponseBytes = 1000 }))
	_, err := w.Next(nextCtx(t))
	if err == nil || !strings.Contains(err.Error(), "1000-byte limit") {
		t.Fatalf("Next on a 5kB answer with a 1000-byte limit: %v", err)
	}
}

func TestInstancesListsOnce(t *testing.T) {
	rp := newReplay(t, step{index: "10", file: "web-one-warning.json"})
	r := newTestRegistry(t, rp.srv.URL, nil)
	insts, err := r.Instances(nextCtx(t), registry.Query{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	req := rp.request(t)
	if req.Query.Has("passing") || req.Query.Has("index") || req.Query.Has("tag") {
		t.Fatalf("query %s: want no passing, index or tag", req.Query.Encode())
	}
	// A warning instance gets Weights.Warning; maintenance is critical.
	if len(insts) != 2 || insts[0].ID != "web-1" || insts[0].Health != registry.Warning || insts[0].Weight != 2 ||
		insts[1].ID != "web-2" || insts[1].Health != registry.Critical || insts[1].Weight != 1 {
		t.Fatalf("instances %+v", insts)
	}
}

func TestEmptyServiceIsAnEmptyNonNilSet(t *testing.T) {
	rp := newReplay(t, step{index: "3", file: "empty.json"})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	insts := mustNext(t, w)
	if insts == nil || len(insts) != 0 {
		t.Fatalf("an unknown service gave %#v, want an empty non-nil slice", insts)
	}
}

func TestUnusableInstancesAreDropped(t *testing.T) {
	rp := newReplay(t, step{index: "10", body: `[
		{"Node": {"Node": "n", "Address": "10.0.0.1"}, "Service": {"ID": "no-port", "Service": "web", "Port": 0}, "Checks": []},
		{"Node": {"Node": "n", "Address": "10.0.0.1"}, "Service": {"ID": "ok", "Service": "web", "Port": 80}, "Checks": []}
	]`})
	w := watchWeb(t, newTestRegistry(t, rp.srv.URL, nil))
	if got := ids(mustNext(t, w)); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("instances %v, want only [ok]", got)
	}
}

func TestWatchRejectsBadQueries(t *testing.T) {
	r := newTestRegistry(t, "127.0.0.1:1", nil)
	for _, q := range []registry.Query{
		{Service: ""},
		{Service: "../agent/self"},
		{Service: "web?x=1"},
		{Service: "web", Tags: []string{""}},
	} {
		if _, err := r.Watch(context.Background(), q); err == nil {
			t.Errorf("Watch(%+v): no error", q)
		}
		if _, err := r.Instances(context.Background(), q); err == nil {
			t.Errorf("Instances(%+v): no error", q)
		}
	}
}
