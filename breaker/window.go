package breaker

import "time"

// counts are what a window holds: calls, failures and slow calls.
type counts struct{ total, failures, slow int }

// window is the closed state's memory of recent outcomes. Its methods run
// under the breaker's mutex.
type window interface {
	record(now time.Time, failed, slow bool) counts
	reset()
}

const (
	flagFailed uint8 = 1 << iota
	flagSlow
)

// countWindow is a ring buffer of the last len(ring) outcomes with running
// totals, so that recording is O(1).
type countWindow struct {
	ring   []uint8 // flag bits per call; oldest at pos once full
	pos    int
	filled int
	c      counts
}

func newCountWindow(n int) *countWindow { return &countWindow{ring: make([]uint8, n)} }

func (w *countWindow) record(_ time.Time, failed, slow bool) counts {
	if w.filled == len(w.ring) {
		old := w.ring[w.pos]
		w.c.total--
		if old&flagFailed != 0 {
			w.c.failures--
		}
		if old&flagSlow != 0 {
			w.c.slow--
		}
	} else {
		w.filled++
	}
	var f uint8
	w.c.total++
	if failed {
		f |= flagFailed
		w.c.failures++
	}
	if slow {
		f |= flagSlow
		w.c.slow++
	}
	w.ring[w.pos] = f
	if w.pos++; w.pos == len(w.ring) {
		w.pos = 0
	}
	return w.c
}

func (w *countWindow) reset() {
	clear(w.ring)
	w.pos, w.filled, w.c = 0, 0, counts{}
}

// timeWindow holds the outcomes of the last len(buckets)*width of time in
// buckets of width each. Bucket i covers the instants whose UnixNano/width
// is its index; a whole bucket drops out when time moves past it.
type timeWindow struct {
	buckets []counts
	width   int64 // nanoseconds
	head    int64 // index of the newest bucket seen
	c       counts
}

func newTimeWindow(window time.Duration, n int) *timeWindow {
	return &timeWindow{buckets: make([]counts, n), width: int64(window) / int64(n)}
}

func (w *timeWindow) record(now time.Time, failed, slow bool) counts {
	idx := now.UnixNano() / w.width
	if idx > w.head {
		// Expire the buckets between the old head and now, at most all.
		n := int64(len(w.buckets))
		if idx-w.head >= n {
			w.reset()
		} else {
			for i := w.head + 1; i <= idx; i++ {
				b := &w.buckets[i%n]
				w.c.total -= b.total
				w.c.failures -= b.failures
				w.c.slow -= b.slow
				*b = counts{}
			}
		}
		w.head = idx
	}
	// An outcome reported with a time older than the head (calls finish
	// out of order) counts in the newest bucket: it is recent anyway.
	b := &w.buckets[w.head%int64(len(w.buckets))]
	b.total++
	w.c.total++
	if failed {
		b.failures++
		w.c.failures++
	}
	if slow {
		b.slow++
		w.c.slow++
	}
	return w.c
}

func (w *timeWindow) reset() {
	clear(w.buckets)
	w.c = counts{}
}
