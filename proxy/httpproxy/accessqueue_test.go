package httpproxy

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// recordingHandler is a slog.Handler that keeps the records it handles;
// each Handle first waits for gate to be closed (a stalled log writer).
type recordingHandler struct {
	gate    <-chan struct{}
	handled chan struct{} // a token per record handled, when not nil
	mu      sync.Mutex
	recs    []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.gate
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	if h.handled != nil {
		h.handled <- struct{}{}
	}
	return nil
}

func (h *recordingHandler) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

func numbered(i int) slog.Record {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
	r.AddAttrs(slog.Int("n", i))
	return r
}

func numberOf(r slog.Record) int64 {
	var n int64 = -1
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "n" {
			n = a.Value.Int64()
		}
		return true
	})
	return n
}

// TestAccessQueueKeepsOrderAndDropsWhenFullWithoutWaiting: with the
// writer stalled, a full queue takes no more lines and add returns at
// once (the test would hang otherwise), counting the drops; the lines it
// took are written in the order they were added, then one line says how
// many were dropped; close returns only once all of it is written.
func TestAccessQueueKeepsOrderAndDropsWhenFullWithoutWaiting(t *testing.T) {
	gate := make(chan struct{})
	h := &recordingHandler{gate: gate}
	const size = 4
	q := newAccessQueue("web", slog.New(h), size, time.Millisecond)
	m := NewMetrics(prometheus.NewRegistry())
	q.counter = m.AccessLogDropped("web")
	// The writer takes the first record and stalls in Handle; size more
	// fill the queue. Until the writer has taken the first, that one may
	// still be in the queue: add until a drop is counted.
	const added = 20
	for i := range added {
		q.add(numbered(i))
	}
	if q.total.Load() == 0 {
		t.Fatalf("%d lines went into a queue of %d with the writer stalled, and none was dropped", added, size)
	}
	kept := added - int(q.total.Load())
	if kept > size+1 {
		t.Fatalf("%d lines kept with a queue of %d and one in the writer's hands", kept, size)
	}
	closed := make(chan struct{})
	go func() {
		q.close()
		close(closed)
	}()
	close(gate)
	<-closed
	recs := h.records() // close returned: everything is written
	if len(recs) != kept+1 {
		t.Fatalf("%d records written, want the %d kept and the drop count", len(recs), kept)
	}
	for i, r := range recs[:kept] {
		if n := numberOf(r); n != int64(i) {
			t.Fatalf("record %d written is line %d: want the order they were added", i, n)
		}
	}
	last := recs[kept]
	var dropped int64
	last.Attrs(func(a slog.Attr) bool {
		if a.Key == "dropped" {
			dropped = a.Value.Int64()
		}
		return true
	})
	if last.Message != "access log lines dropped" || last.Level != slog.LevelWarn || dropped != int64(added-kept) {
		t.Fatalf("last record %q (%v) dropped=%d, want the warning that %d were dropped", last.Message, last.Level, dropped, added-kept)
	}
	q.add(numbered(99)) // after close: dropped, not a panic
	if n := q.total.Load(); n != int64(added-kept)+1 {
		t.Fatalf("a line added after close: %d dropped in all, want %d", n, added-kept+1)
	}
	var mm dto.Metric
	q.counter.Write(&mm)
	if got := mm.GetCounter().GetValue(); got != float64(added-kept+1) {
		t.Fatalf("switchboard_access_log_dropped_total{listener=\"web\"} = %v, want %d", got, added-kept+1)
	}
}

// TestAccessQueueCloseWritesWhatIsQueued: lines still queued when close
// is called are all written before it returns.
func TestAccessQueueCloseWritesWhatIsQueued(t *testing.T) {
	closing := make(chan struct{})
	h := &recordingHandler{gate: closing}                  // the writer is stalled until close is called
	q := newAccessQueue("web", slog.New(h), 16, time.Hour) // written by close, not by the interval
	for i := range 10 {
		q.add(numbered(i))
	}
	close(closing)
	q.close()
	recs := h.records()
	if len(recs) != 10 {
		t.Fatalf("close returned with %d of 10 queued lines written", len(recs))
	}
	for i, r := range recs {
		if n := numberOf(r); n != int64(i) {
			t.Fatalf("record %d written is line %d", i, n)
		}
	}
}

// TestAccessQueueWritesWithinItsInterval: queued lines are written by the
// writer on its own (no close), in order.
func TestAccessQueueWritesWithinItsInterval(t *testing.T) {
	open := make(chan struct{})
	close(open)
	h := &recordingHandler{gate: open, handled: make(chan struct{}, 3)}
	q := newAccessQueue("web", slog.New(h), 16, time.Millisecond)
	defer q.close()
	for i := range 3 {
		q.add(numbered(i))
	}
	for i := range 3 {
		select {
		case <-h.handled:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 3 queued lines written after 10s", i)
		}
	}
	for i, r := range h.records() {
		if n := numberOf(r); n != int64(i) {
			t.Fatalf("record %d written is line %d", i, n)
		}
	}
}
