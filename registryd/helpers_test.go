package registryd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// testMinInterval replaces Consul's 1s minimum check interval in tests, so
// that HTTP and TCP checks notice a change within a fraction of a second.
const testMinInterval = 20 * time.Millisecond

var quietLogger = slog.New(slog.DiscardHandler)

// startServer starts a registry on a free loopback port, closed when the
// test ends.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "test-node"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.minInterval = testMinInterval
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func baseURL(s *Server) string { return "http://" + s.Addr() }

// goClient is the official Consul Go client pointed at s.
func goClient(t testing.TB, s *Server, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = s.Addr()
	cfg.Token = token
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends one request and returns the status, body and headers.
func do(t testing.TB, method, url, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func headerIndex(t testing.TB, h http.Header) uint64 {
	t.Helper()
	v := h.Get("X-Consul-Index")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("X-Consul-Index %q is not a number", v)
	}
	if n == 0 {
		t.Fatal("X-Consul-Index is 0; the server must never return 0")
	}
	return n
}

// awaitHealth blocks on the service's health with Consul blocking queries
// until cond holds for the entries, or the deadline passes. It waits on
// index changes, never on a timer.
func awaitHealth(t testing.TB, c *api.Client, service string, within time.Duration, what string, cond func([]*api.ServiceEntry) bool) []*api.ServiceEntry {
	t.Helper()
	deadline := time.Now().Add(within)
	var idx uint64
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: not within %v", what, within)
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		entries, meta, err := c.Health().Service(service, "", false, (&api.QueryOptions{WaitIndex: idx, WaitTime: left}).WithContext(ctx))
		cancel()
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (last error %v)", what, within, err)
			}
			t.Fatalf("%s: health query: %v", what, err)
		}
		if cond(entries) {
			return entries
		}
		if meta.LastIndex < idx {
			t.Fatalf("%s: index went backwards from %d to %d", what, idx, meta.LastIndex)
		}
		idx = meta.LastIndex
	}
}

// aggregated is the worst status of an entry's checks.
func aggregated(e *api.ServiceEntry) string { return e.Checks.AggregatedStatus() }

func statusOf(entries []*api.ServiceEntry, id string) string {
	for _, e := range entries {
		if e.Service.ID == id {
			return aggregated(e)
		}
	}
	return "absent"
}

// serviceCount is how many services the registry holds.
func serviceCount(s *Server) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.services)
}

func currentIndex(s *Server) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.index
}

// logBuffer collects a Server's log lines for a test to inspect.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logger logs every level to b, as text.
func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// stateBytes is the registry's state as charged against its budget.
func stateBytes(s *Server) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stateBytes
}
