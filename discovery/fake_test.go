package discovery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

// fakeRegistry is a Discoverer the test drives through channels: every
// Next of a watch on service S returns the next answer sent with send(S, ...)
// and blocks until there is one.
type fakeRegistry struct {
	mu      sync.Mutex
	answers map[string]chan answer
	watchs  atomic.Int64 // Watch calls
	stops   atomic.Int64 // Watcher.Stop calls
	nexts   atomic.Int64 // Next calls
}

type answer struct {
	insts []registry.Instance
	err   error
}

func newFakeRegistry() *fakeRegistry { return &fakeRegistry{answers: map[string]chan answer{}} }

func (f *fakeRegistry) ch(service string) chan answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.answers[service]
	if c == nil {
		c = make(chan answer)
		f.answers[service] = c
	}
	return c
}

// send hands one answer to the watch of service, failing the test if no
// watch takes it within 5s.
func (f *fakeRegistry) send(t testing.TB, service string, a answer) {
	t.Helper()
	select {
	case f.ch(service) <- a:
	case <-time.After(5 * time.Second):
		t.Fatalf("no watch of %q called Next within 5s", service)
	}
}

func (f *fakeRegistry) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	return nil, fmt.Errorf("fake: Instances is not used by discovery")
}

func (f *fakeRegistry) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	f.watchs.Add(1)
	return &fakeWatcher{f: f, c: f.ch(q.Service)}, nil
}

type fakeWatcher struct {
	f *fakeRegistry
	c chan answer
}

func (w *fakeWatcher) Next(ctx context.Context) ([]registry.Instance, error) {
	w.f.nexts.Add(1)
	select {
	case a := <-w.c:
		return a.insts, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *fakeWatcher) Stop() { w.f.stops.Add(1) }

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// recorder subscribes to a view and queues every snapshot it gets.
type recorder struct {
	c chan Snapshot
}

func record(v *View) (*recorder, func()) {
	r := &recorder{c: make(chan Snapshot, 1024)}
	cancel := v.Subscribe(func(s Snapshot) { r.c <- s })
	return r, cancel
}

// next returns the next snapshot, failing the test after 5s without one.
func (r *recorder) next(t testing.TB) Snapshot {
	t.Helper()
	select {
	case s := <-r.c:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot within 5s")
		return Snapshot{}
	}
}

// none fails the test if a snapshot is queued.
func (r *recorder) none(t testing.TB) {
	t.Helper()
	select {
	case s := <-r.c:
		t.Fatalf("unexpected snapshot v%d: %+v", s.Version, s)
	default:
	}
}

func inst(service, id string, port int) registry.Instance {
	return registry.Instance{ID: id, Service: service, Address: "127.0.0.1", Port: port}
}
