package httpproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
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

// writesRecorder is an io.Writer that keeps each Write apart; a Write
// first waits for gate (a stalled log reader), and says it has begun on
// entered.
type writesRecorder struct {
	gate    <-chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	writes  [][]byte
}

func (w *writesRecorder) Write(p []byte) (int, error) {
	if w.entered != nil {
		select {
		case w.entered <- struct{}{}:
		default:
		}
	}
	<-w.gate
	w.mu.Lock()
	w.writes = append(w.writes, bytes.Clone(p))
	w.mu.Unlock()
	return len(p), nil
}

func (w *writesRecorder) all() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// numberedLine is the i-th test line.
func numberedLine(i int) accessLine {
	l := sampleLine("/n/"+strconv.Itoa(i), 4)
	l.status = 200 + i
	return l
}

// encodedQueue starts a queue that encodes its lines in format to w.
func encodedQueue(t *testing.T, format string, w io.Writer, size int, every time.Duration) *accessQueue {
	t.Helper()
	out, err := newAccessOutput(AccessLog{Format: format, Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	return startAccessQueue("web", slog.New(slog.DiscardHandler), out, size, every)
}

// TestAccessQueueEncodedWritesAFlushInOneWrite: lines queued between two
// flushes reach the writer in one Write, in the order they were added,
// each the bytes slog's handler writes for it; close writes them.
func TestAccessQueueEncodedWritesAFlushInOneWrite(t *testing.T) {
	for _, json := range []bool{false, true} {
		open := make(chan struct{})
		close(open)
		w := &writesRecorder{gate: open}
		q := encodedQueue(t, map[bool]string{false: AccessLogText, true: AccessLogJSON}[json], w, 16, time.Hour) // written by close
		var want []byte
		base := time.Date(2026, 12, 2, 5, 24, 45, 0, time.UTC)
		for i := range 10 {
			l, now := numberedLine(i), base.Add(time.Duration(i)*7*time.Millisecond)
			q.addLine(now, &l)
			want = append(want, viaHandler(t, json, now, &l)...)
		}
		q.close()
		writes := w.all()
		if len(writes) != 1 {
			t.Fatalf("%s: 10 lines of one flush took %d writes, want 1", formatName(json), len(writes))
		}
		if !bytes.Equal(writes[0], want) {
			t.Fatalf("%s: written\n%s\nwant slog's lines, in order:\n%s", formatName(json), writes[0], want)
		}
	}
}

// TestAccessQueueEncodedDropsWhenFullAndSaysSo: with the writer stalled
// in a write, the queue takes size lines and drops the rest at once,
// counted; once the writer goes on, the kept lines are written in order,
// then the warning of how many were dropped, as slog's handler writes it.
func TestAccessQueueEncodedDropsWhenFullAndSaysSo(t *testing.T) {
	gate := make(chan struct{})
	w := &writesRecorder{gate: gate, entered: make(chan struct{}, 1)}
	const size = 4
	q := encodedQueue(t, AccessLogText, w, size, time.Millisecond)
	m := NewMetrics(prometheus.NewRegistry())
	q.counter = m.AccessLogDropped("web")
	now := time.Date(2026, 12, 2, 5, 24, 45, 0, time.UTC)
	first := numberedLine(0)
	q.addLine(now, &first)
	select {
	case <-w.entered: // the writer holds line 0 and waits for the gate
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not take the first line within 10s")
	}
	const added = 20
	var kept []byte
	for i := 1; i <= added; i++ {
		l := numberedLine(i)
		q.addLine(now, &l)
		if i <= size {
			kept = append(kept, viaHandler(t, false, now, &l)...)
		}
	}
	if n := q.total.Load(); n != added-size {
		t.Fatalf("%d lines into a queue of %d with the writer stalled: %d dropped, want %d", added, size, n, added-size)
	}
	closed := make(chan struct{})
	go func() {
		q.close()
		close(closed)
	}()
	close(gate)
	<-closed
	writes := w.all()
	if len(writes) != 2 || !bytes.Equal(writes[0], viaHandler(t, false, now, &first)) {
		t.Fatalf("writes %q, want line 0, then the kept lines and the drop report", writes)
	}
	second := writes[1]
	if !bytes.HasPrefix(second, kept) {
		t.Fatalf("second write\n%s\nwant the %d kept lines first, in order:\n%s", second, size, kept)
	}
	report := string(second[len(kept):])
	wantReport := fmt.Sprintf(" level=WARN msg=\"access log lines dropped\" listener=web dropped=%d queue=%d\n", added-size, size)
	if !strings.HasPrefix(report, "time=") || !strings.HasSuffix(report, wantReport) || strings.Count(report, "\n") != 1 {
		t.Fatalf("after the kept lines %q, want one line time=...%s", report, wantReport)
	}
	l := numberedLine(99)
	q.addLine(now, &l) // after close: dropped, not a panic
	var mm dto.Metric
	q.counter.Write(&mm)
	if got := mm.GetCounter().GetValue(); got != added-size+1 {
		t.Fatalf("switchboard_access_log_dropped_total{listener=\"web\"} = %v, want %d", got, added-size+1)
	}
}

// TestAccessOutputFollowsTheLevel: lines are made while the level lets
// Info through, as the handler's Enabled says, and the level may change
// while it runs (a reload).
func TestAccessOutputFollowsTheLevel(t *testing.T) {
	var lv slog.LevelVar
	out, err := newAccessOutput(AccessLog{Format: AccessLogJSON, Writer: io.Discard, Level: &lv})
	if err != nil {
		t.Fatal(err)
	}
	h := slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: &lv})
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelInfo} {
		lv.Set(l)
		if got, want := out.enabled(), h.Enabled(context.Background(), slog.LevelInfo); got != want {
			t.Fatalf("at level %v the encoder's enabled is %v, the handler's %v", l, got, want)
		}
	}
	if out, _ := newAccessOutput(AccessLog{Format: AccessLogText, Writer: io.Discard}); !out.enabled() {
		t.Fatal("with no level the encoder writes no line; slog's default level is Info")
	}
}

// TestAccessLogRefusesWhatItCannotWrite: a format other than text and
// json, or no writer, is an error that names the problem, and the
// server keeps writing through its logger.
func TestAccessLogRefusesWhatItCannotWrite(t *testing.T) {
	s := NewServer(slog.New(slog.DiscardHandler), NewMetrics(prometheus.NewRegistry()))
	for _, c := range []struct {
		al   AccessLog
		want string
	}{
		{AccessLog{Format: "logfmt", Writer: io.Discard}, `format "logfmt": want "text" or "json"`},
		{AccessLog{Format: "json"}, `format "json" has no writer`},
	} {
		err := s.SetAccessLog(c.al)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("SetAccessLog(%+v) = %v, want an error saying %s", c.al, err, c.want)
		}
		if s.out != nil {
			t.Fatalf("a refused SetAccessLog(%+v) changed the server's output", c.al)
		}
	}
	if err := s.SetAccessLog(AccessLog{Format: AccessLogText, Writer: io.Discard}); err != nil || s.out == nil {
		t.Fatalf("SetAccessLog(text, io.Discard) = %v, output %v", err, s.out)
	}
}
