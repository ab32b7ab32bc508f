package clienttest

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger logs to tb.Log (shown with -v or when the test fails) until
// the test's cleanup runs; later lines, from goroutines that outlive the
// test, are dropped (tb.Log would panic).
func testLogger(tb testing.TB) *slog.Logger {
	w := &tbWriter{tb: tb}
	tb.Cleanup(w.stop) // registered first, so it runs last
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
