package httpproxy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// accessQueueSize is how many access log lines a listener's event loops
// may have waiting to be written. A line is about 300 bytes in the queue,
// so the queue holds ~1.2 MB; at 100k requests a second it rides out a
// writer stalled for ~40 ms.
const accessQueueSize = 4096

// accessFlushEvery is how long the writer lets lines gather before it
// writes them: waking it for every line would cost a loop a goroutine
// wake-up per request (measured: twice the time of a request with the log
// off), waking it once per interval costs nothing per request.
const accessFlushEvery = 10 * time.Millisecond

// accessQueue writes the access log lines of a listener's event loops
// without making a loop wait: a loop hands a finished line to the queue,
// and one goroutine writes the lines, every accessFlushEvery, in the order
// they were added. With the Server's AccessLog (out), a loop encodes its
// line into the queue's buffer (addLine) and the writer writes all that
// gathered in one Write to out's writer; without, a loop hands the queue a
// record (add) and the writer hands the records one by one to the
// listener's log handler. Either write, to stderr, can block on a full
// pipe. When the queue is full the
// line is dropped and counted, never waited for: a loop that waits for the
// log stops serving every connection it holds, so a stalled log reader
// would stall the proxy. The count of dropped lines is written to the log,
// in its place in the order, once the writer catches up ("access log lines
// dropped").
//
// close writes what is queued and stops the writer.
type accessQueue struct {
	name    string // the listener's
	log     *slog.Logger
	every   time.Duration
	records chan slog.Record // without out
	// With out: the encoded lines waiting (buf, lines of them; up to
	// size), under mu, and the writer's other buffer, swapped with buf
	// as it takes the lines.
	out   *accessOutput
	size  int
	enc   lineEncoder // the loops', under mu
	buf   []byte
	lines int
	spare []byte
	wenc  lineEncoder // the writer's, for the drop report
	// wake holds a token when lines wait for the writer: a loop wakes the
	// writer only when it is idle.
	wake    chan struct{}
	dropped atomic.Int64       // since the writer last reported drops
	total   atomic.Int64       // dropped ever
	counter prometheus.Counter // switchboard_access_log_dropped_total's series, or nil
	mu      sync.RWMutex       // add (read) against close (write); addLine (write)
	closed  bool
	stop    chan struct{} // closed by close
	done    chan struct{} // closed by the writer when it has written all
}

// newAccessQueue starts the writer of listener name's queue of size
// records, which writes through log what gathered every interval.
func newAccessQueue(name string, log *slog.Logger, size int, every time.Duration) *accessQueue {
	return startAccessQueue(name, log, nil, size, every)
}

// startAccessQueue starts the writer of listener name's queue of size
// lines, which writes what gathered every interval: encoded to out, or
// with out nil, through log.
func startAccessQueue(name string, log *slog.Logger, out *accessOutput, size int, every time.Duration) *accessQueue {
	q := &accessQueue{name: name, log: log, every: every, out: out, size: size,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if out != nil {
		q.enc.json, q.wenc.json = out.json, out.json
	} else {
		q.records = make(chan slog.Record, size)
	}
	go q.write()
	return q
}

// enabled reports whether an access line would be written: the loop
// builds none otherwise.
func (q *accessQueue) enabled() bool {
	if q.out != nil {
		return q.out.enabled()
	}
	return q.log.Handler().Enabled(context.Background(), slog.LevelInfo)
}

// addLine encodes l, logged at now, into the queue, or drops it
// (counted) when the queue is full or closed. It never blocks on the
// writer.
func (q *accessQueue) addLine(now time.Time, l *accessLine) {
	q.mu.Lock()
	if q.closed || q.lines >= q.size {
		q.mu.Unlock()
		q.drop()
		return
	}
	q.buf = q.enc.appendAccess(q.buf, now, l)
	q.lines++
	q.mu.Unlock()
	q.wakeWriter()
}

// add queues r, or drops it (counted) when the queue is full or closed.
// It never blocks on the writer.
func (q *accessQueue) add(r slog.Record) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.drop()
		return
	}
	select {
	case q.records <- r:
	default:
		q.drop()
	}
	q.wakeWriter()
}

// wakeWriter wakes the writer, if it is idle.
func (q *accessQueue) wakeWriter() {
	select {
	case q.wake <- struct{}{}:
	default: // the writer has been woken already
	}
}

func (q *accessQueue) drop() {
	q.dropped.Add(1)
	q.total.Add(1)
	if q.counter != nil {
		q.counter.Inc()
	}
}

// write is the writer: woken by a line, it waits q.every for more, then
// writes all that is queued, in order; after close it writes the rest and
// returns.
func (q *accessQueue) write() {
	defer close(q.done)
	var h slog.Handler
	if q.out == nil {
		h = q.log.Handler()
	}
	ctx := context.Background()
	timer := time.NewTimer(q.every)
	timer.Stop()
	for {
		stopping := false
		select {
		case <-q.wake:
			timer.Reset(q.every)
			select {
			case <-timer.C:
			case <-q.stop:
				timer.Stop()
				stopping = true
			}
		case <-q.stop:
			stopping = true
		}
		q.writeQueued(ctx, h)
		if stopping {
			return
		}
	}
}

// writeQueued writes the queued lines, then how many were dropped, if
// any.
func (q *accessQueue) writeQueued(ctx context.Context, h slog.Handler) {
	if q.out != nil {
		q.writeEncoded()
		return
	}
	for {
		select {
		case r := <-q.records:
			h.Handle(ctx, r)
		default:
			q.reportDrops(ctx, h)
			return
		}
	}
}

// reportDrops writes how many lines were dropped since the last report,
// if any.
func (q *accessQueue) reportDrops(ctx context.Context, h slog.Handler) {
	n := q.dropped.Swap(0)
	if n == 0 {
		return
	}
	h.Handle(ctx, dropReport(time.Now(), q.name, n, cap(q.records)))
}

// dropReport is the record that says n lines of listener's queue of size
// lines were dropped.
func dropReport(now time.Time, listener string, n int64, size int) slog.Record {
	r := slog.NewRecord(now, slog.LevelWarn, "access log lines dropped", 0)
	r.AddAttrs(slog.String("listener", listener), slog.Int64("dropped", n), slog.Int("queue", size))
	return r
}

// appendDropReport appends dropReport's line, encoded by e.
func (e *lineEncoder) appendDropReport(b []byte, now time.Time, listener string, n int64, size int) []byte {
	w := e.start(b, now, slog.LevelWarn, "access log lines dropped")
	w.str("listener", listener)
	w.int("dropped", n)
	w.int("queue", int64(size))
	return w.end()
}

// maxSpare is the largest buffer the writer keeps for the next flush: one
// that a burst of long lines grew beyond it goes.
const maxSpare = 4 << 20

// writeEncoded writes the encoded lines queued, and after them the report
// of the lines dropped since the last, if any, in one Write.
func (q *accessQueue) writeEncoded() {
	q.mu.Lock()
	b := q.buf
	q.buf, q.lines = q.spare[:0], 0
	q.mu.Unlock()
	if n := q.dropped.Swap(0); n != 0 {
		b = q.wenc.appendDropReport(b, time.Now(), q.name, n, q.size)
	}
	if len(b) > 0 {
		q.out.w.Write(b)
	}
	if cap(b) > maxSpare {
		b = nil
	}
	q.spare = b
}

// close writes the queued records and stops the writer; lines added after
// it are dropped. It returns once they are written.
func (q *accessQueue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.stop)
	}
	q.mu.Unlock()
	<-q.done
}
