package consul

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// step is one canned Consul answer: a status (200 when 0), an
// X-Consul-Index header (none when ""), and a body from testdata (file) or
// literal (body).
type step struct {
	status int
	index  string
	file   string
	body   string
}

// seen is one request the replay server received.
type seen struct {
	Method, Path string
	Query        url.Values
	Header       http.Header
	Body         []byte
	At           time.Time
}

// replay is a real HTTP server that answers each request with the next
// step, in order; with no step left, a request blocks (like a blocking
// query with nothing new) until the client gives up or the test ends.
type replay struct {
	srv  *httptest.Server
	mu   sync.Mutex
	next []step
	reqs chan seen
	quit chan struct{}
}

func newReplay(t *testing.T, steps ...step) *replay {
	t.Helper()
	r := &replay{next: steps, reqs: make(chan seen, 256), quit: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.quit) }) // runs first: frees blocked handlers
	return r
}

func (r *replay) add(steps ...step) {
	r.mu.Lock()
	r.next = append(r.next, steps...)
	r.mu.Unlock()
}

func (r *replay) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.reqs <- seen{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Header: req.Header.Clone(), Body: body, At: time.Now()}
	r.mu.Lock()
	var s *step
	if len(r.next) > 0 {
		s = &r.next[0]
		r.next = r.next[1:]
	}
	r.mu.Unlock()
	if s == nil {
		select {
		case <-req.Context().Done():
		case <-r.quit:
		}
		return
	}
	data := []byte(s.body)
	if s.file != "" {
		var err error
		if data, err = os.ReadFile(filepath.Join("testdata", s.file)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if s.index != "" {
		w.Header().Set("X-Consul-Index", s.index)
	}
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	status := s.status
	if status == 0 {
		status = http.StatusOK
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(data)
}

// request returns the next request the server got, failing after 5s.
func (r *replay) request(t *testing.T) seen {
	t.Helper()
	select {
	case s := <-r.reqs:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no request reached the server within 5s")
		return seen{}
	}
}

// noRequest fails if a request is queued.
func (r *replay) noRequest(t *testing.T) {
	t.Helper()
	select {
	case s := <-r.reqs:
		t.Fatalf("unexpected request %s %s?%s", s.Method, s.Path, s.Query.Encode())
	default:
	}
}

func newTestRegistry(t *testing.T, addr string, mod func(*Config)) *Registry {
	t.Helper()
	cfg := Config{Address: addr, ChurnInterval: time.Millisecond, WaitTime: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func nextCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
