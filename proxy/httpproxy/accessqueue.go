package httpproxy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// accessQueueSize is how many access log lines a listener's event loops
// may have waiting to be written. A line is about 300 bytes in the queue,
// so the queue holds ~1.2 MB; at 100k requests a second it rides out a
// writer stalled for ~40 ms.
const accessQueueSize = 4096

// accessQueue writes the access log lines of a listener's event loops
// without making a loop wait: a loop hands a finished record to the queue
// (add), and one goroutine writes the records in the order they were
// added through the listener's log handler (whose write to stderr can
// block on a full pipe). When the queue is full the line is dropped and
// counted, never waited for: a loop that waits for the log stops serving
// every connection it holds, so a stalled log reader would stall the
// proxy. The count of dropped lines is written to the log, in its place
// in the order, once the writer catches up ("access log lines dropped").
//
// close writes what is queued and stops the writer.
type accessQueue struct {
	name    string // the listener's
	log     *slog.Logger
	records chan slog.Record
	dropped atomic.Int64 // since the writer last reported drops
	total   atomic.Int64 // dropped ever
	mu      sync.RWMutex // add (read) against close (write)
	closed  bool
	done    chan struct{}
}

// newAccessQueue starts the writer of listener name's queue of size
// records, which writes through log.
func newAccessQueue(name string, log *slog.Logger, size int) *accessQueue {
	q := &accessQueue{name: name, log: log, records: make(chan slog.Record, size), done: make(chan struct{})}
	go q.write()
	return q
}

// enabled reports whether an access line would be written: the loop
// builds none otherwise.
func (q *accessQueue) enabled() bool {
	return q.log.Handler().Enabled(context.Background(), slog.LevelInfo)
}

// add queues r, or drops it (counted) when the queue is full or closed.
// It never blocks on the writer.
func (q *accessQueue) add(r slog.Record) {
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		q.drop()
		return
	}
	select {
	case q.records <- r:
	default:
		q.drop()
	}
	q.mu.RUnlock()
}

func (q *accessQueue) drop() {
	q.dropped.Add(1)
	q.total.Add(1)
}

// write is the writer: it writes the records in order until close.
func (q *accessQueue) write() {
	defer close(q.done)
	h := q.log.Handler()
	ctx := context.Background()
	for r := range q.records {
		h.Handle(ctx, r)
		if len(q.records) == 0 {
			q.reportDrops(ctx, h)
		}
	}
	q.reportDrops(ctx, h)
}

// reportDrops writes how many lines were dropped since the last report,
// if any.
func (q *accessQueue) reportDrops(ctx context.Context, h slog.Handler) {
	n := q.dropped.Swap(0)
	if n == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "access log lines dropped", 0)
	r.AddAttrs(slog.String("listener", q.name), slog.Int64("dropped", n), slog.Int("queue", cap(q.records)))
	h.Handle(ctx, r)
}

// close writes the queued records and stops the writer; lines added after
// it are dropped. It returns once they are written.
func (q *accessQueue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.records)
	}
	q.mu.Unlock()
	<-q.done
}
