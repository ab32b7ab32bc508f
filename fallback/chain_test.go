package fallback

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustNew(t *testing.T, cfg Config, s Sender) *Chain {
	t.Helper()
	c, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDegradedHeaderFormat(t *testing.T) {
	if HeaderDegraded != "X-Switchboard-Degraded" {
		t.Fatalf("HeaderDegraded = %q", HeaderDegraded)
	}
	if got := Degraded("stale", "breaker_open"); got != "stale: breaker_open" {
		t.Fatalf("Degraded = %q, want %q", got, "stale: breaker_open")
	}
	if got := Degraded(StepStatic, StatusReason(503)); got != "static: status:503" {
		t.Fatalf("Degraded = %q, want %q", got, "static: status:503")
	}
}

func TestChainTriesStepsInOrder(t *testing.T) {
	var calls []string
	sender := SenderFunc(func(_ context.Context, up string, _ *http.Request) (*http.Response, error) {
		calls = append(calls, up)
		return nil, errors.New("connection refused")
	})
	c := mustNew(t, Config{Steps: []StepConfig{
		{Type: StepBackup, Upstream: "orders-dr"},
		{Type: StepStale, MaxAge: time.Minute},
		{Type: StepStatic, Status: 503, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"error":"degraded"}`},
	}}, sender)
	req, _ := http.NewRequest(http.MethodGet, "http://x/orders", nil)

	// Nothing stored: backup fails, stale has nothing, static serves.
	resp, step, err := c.Serve(context.Background(), req, "/orders", BreakerOpen.String(), t0)
	if err != nil || step != StepStatic {
		t.Fatalf("Serve = step %q, %v; want static", step, err)
	}
	if resp.StatusCode != 503 || body(t, resp) != `{"error":"degraded"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("static response = %d %v", resp.StatusCode, resp.Header)
	}
	if got := resp.Header.Get(HeaderDegraded); got != "static: breaker_open" {
		t.Fatalf("%s = %q, want %q", HeaderDegraded, got, "static: breaker_open")
	}
	if len(calls) != 1 || calls[0] != "orders-dr" {
		t.Fatalf("backup calls = %v, want one to orders-dr before the other steps", calls)
	}

	// A good response stored: stale serves it, before static.
	c.Store("/orders", 200, http.Header{"Etag": {"v7"}}, []byte("last good"), t0)
	resp, step, err = c.Serve(context.Background(), req, "/orders", RetriesExhausted.String(), t0.Add(5*time.Second))
	if err != nil || step != StepStale {
		t.Fatalf("Serve = step %q, %v; want stale", step, err)
	}
	if resp.StatusCode != 200 || body(t, resp) != "last good" || resp.Header.Get("Etag") != "v7" || resp.Header.Get("Age") != "5" {
		t.Fatalf("stale response = %d %v", resp.StatusCode, resp.Header)
	}
	if got := resp.Header.Get(HeaderDegraded); got != "stale: retries_exhausted" {
		t.Fatalf("%s = %q", HeaderDegraded, got)
	}

	// Too old for max_age: static again.
	if _, step, _ = c.Serve(context.Background(), req, "/orders", "breaker_open", t0.Add(time.Minute)); step != StepStatic {
		t.Fatalf("Serve after max_age served %q, want static", step)
	}
}

func TestChainBackupServesFirst(t *testing.T) {
	sender := SenderFunc(func(_ context.Context, up string, r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("from " + up))}, nil
	})
	c := mustNew(t, Config{Steps: []StepConfig{{Type: StepBackup, Upstream: "dr"}, {Type: StepStatic, Status: 503}}}, sender)
	resp, step, err := c.Serve(context.Background(), nil, "", "no_healthy_endpoint", t0)
	if err != nil || step != StepBackup || body(t, resp) != "from dr" {
		t.Fatalf("Serve = %q, %v", step, err)
	}
	if got := resp.Header.Get(HeaderDegraded); got != "backup: no_healthy_endpoint" {
		t.Fatalf("%s = %q", HeaderDegraded, got)
	}
}

func TestChainBackupAnsweringATriggerStatusFallsThrough(t *testing.T) {
	closed := false
	sender := SenderFunc(func(context.Context, string, *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 503, Body: closeRecorder{&closed}}, nil
	})
	c := mustNew(t, Config{On: []string{"status:503"}, Steps: []StepConfig{{Type: StepBackup, Upstream: "dr"}, {Type: StepStatic, Status: 200, Body: "ok"}}}, sender)
	_, step, err := c.Serve(context.Background(), nil, "", StatusReason(503), t0)
	if err != nil || step != StepStatic || !closed {
		t.Fatalf("Serve = %q, %v, backup body closed %v; want static after the backup's 503 was closed", step, err, closed)
	}
}

type closeRecorder struct{ closed *bool }

func (closeRecorder) Read([]byte) (int, error) { return 0, io.EOF }
func (c closeRecorder) Close() error           { *c.closed = true; return nil }

func TestChainAllStepsFailJoinsEveryError(t *testing.T) {
	sender := SenderFunc(func(context.Context, string, *http.Request) (*http.Response, error) {
		return nil, errors.New("dial tcp: connection refused")
	})
	c := mustNew(t, Config{Steps: []StepConfig{{Type: StepBackup, Upstream: "dr"}, {Type: StepStale, MaxAge: time.Second}}}, sender)
	_, _, err := c.Serve(context.Background(), nil, "k", "breaker_open", t0)
	if err == nil || !errors.Is(err, ErrNoStale) {
		t.Fatalf("err = %v, want both steps' errors joined", err)
	}
	want := "fallback backup: upstream \"dr\": dial tcp: connection refused\nfallback stale: no stored response younger than max_age"
	if err.Error() != want {
		t.Fatalf("err = %q\nwant  %q", err, want)
	}
}

func TestStaticBodyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "maintenance.html")
	if err := os.WriteFile(path, []byte("<h1>back soon</h1>"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustNew(t, Config{Steps: []StepConfig{{Type: StepStatic, Status: 503, BodyFile: path}}}, nil)
	resp, _, err := c.Serve(context.Background(), nil, "", "breaker_open", t0)
	if err != nil || body(t, resp) != "<h1>back soon</h1>" || resp.ContentLength != 18 || resp.Header.Get("Content-Length") != "18" {
		t.Fatalf("static body_file response: %v %v", err, resp.Header)
	}
	if _, err := New(Config{Steps: []StepConfig{{Type: StepStatic, Status: 503, BodyFile: path + ".missing"}}}, nil); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New with a missing body_file = %v, want a not-exist error", err)
	}
}

func TestChainConcurrentServeAndStore(t *testing.T) {
	c := mustNew(t, Config{Steps: []StepConfig{{Type: StepStale, MaxAge: time.Minute}, {Type: StepStatic, Status: 503}}}, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				if g%2 == 0 {
					c.Store("k", 200, http.Header{"N": {"1"}}, []byte("good"), now)
					continue
				}
				resp, step, err := c.Serve(context.Background(), nil, "k", "breaker_open", now)
				if err != nil {
					t.Error(err)
					return
				}
				if got := resp.Header.Get(HeaderDegraded); got != Degraded(step, "breaker_open") {
					t.Errorf("%s = %q from step %s", HeaderDegraded, got, step)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestFirstReturnsFirstSuccess(t *testing.T) {
	ran := []string{}
	mk := func(name string, err error) Step[int] {
		return Step[int]{Name: name, Run: func(context.Context) (int, error) { ran = append(ran, name); return len(name), err }}
	}
	v, name, err := First(context.Background(), mk("a", errors.New("down")), mk("bb", nil), mk("ccc", nil))
	if err != nil || v != 2 || name != "bb" || strings.Join(ran, ",") != "a,bb" {
		t.Fatalf("First = %d %q %v after %v; want 2 from bb, ccc not run", v, name, err, ran)
	}
	if _, _, err := First[int](context.Background()); !errors.Is(err, ErrNoSteps) {
		t.Fatalf("First with no steps = %v", err)
	}
}
