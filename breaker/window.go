package breaker

import (
	"sync"
	"sync/atomic"
)

// counts are what a window holds: calls, failures and slow calls.
type counts struct{ total, failures, slow int }

// An outcome's flags, as a window stores them: a plain success is 0.
const (
	flagFailed uint32 = 1 << iota
	flagSlow
)

// bad packs an outcome's failure and slowness into the form of a window's
// "bad" word: failures in the low 32 bits, slow calls in the high 32.
func bad(flags uint32) uint64 { return uint64(flags&flagFailed) | uint64(flags>>1)<<32 }

// cacheLine is the padding that keeps the words every call writes on a
// cache line of their own: away from the words every call only reads, so
// that on several cores those stay cached, and away from neighbouring
// objects in memory (another breaker's window, say), so that two busy
// breakers do not slow each other down.
const cacheLine = 64

// The windows below are written without a lock, by every call that
// reports an outcome in the closed state. Each belongs to one closed
// phase (see phase): a breaker that opens and closes again starts a fresh
// window rather than clearing the old one, so a call admitted before a
// transition that reports after it writes to a window nobody reads any
// more. That is how an outcome of a past phase is dropped without a
// generation check, and why there is no reset.

// countWindow is a ring of the last len(ring) outcomes. A call takes the
// next slot with one atomic add on seq; the number of calls the window
// holds is min(seq, len(ring)), so it needs no counter of its own. The
// failures and slow calls are a running sum in bad, changed only when a
// slot's flags change: successes replacing successes write nothing but
// seq, and a success into a full window of successes writes nothing at
// all (the healthy steady state, which then costs two loads).
type countWindow struct {
	ring []atomic.Uint32 // flags of the call that last took each slot
	size uint64
	_    [cacheLine]byte
	seq  atomic.Uint64 // calls recorded; call n takes slot (n-1) % size
	bad  atomic.Uint64 // failures | slow<<32 over the ring
	_    [cacheLine - 16]byte
}

func newCountWindow(n int) countWindow {
	return countWindow{ring: make([]atomic.Uint32, n), size: uint64(n)}
}

// record adds one outcome. It returns the window's counts after it, and
// changed false when the counts are the same as before the call (a full
// window whose slot held the same flags): nothing can have newly reached a
// threshold then.
//
// Concurrent calls are exact once they have all returned: each slot holds
// the flags of one call, and bad is the sum over the slots because a slot
// is changed only by Swap, whose old value the same call then takes out
// of bad. While a call is between its add on seq and its Swap, ring-size
// other calls may complete and reach its slot (a small ring, or a
// preempted goroutine); their updates to bad may then land in the other
// order, and a call may see a sum off by the few such overlaps (even
// below zero in a field, which borrows from the other). record reports
// changed false for a sum it can tell is torn (a field above the total);
// the next call sees it whole.
func (w *countWindow) record(flags uint32) (counts, bool) {
	// A success into a full window of successes changes nothing, wherever
	// it lands in the ring: skip it, with two loads of a line that then
	// nobody writes. (Had a failure raced in, this success is ordered
	// before it, and that order gives the same window.)
	if flags == 0 && w.bad.Load() == 0 && w.seq.Load() >= w.size {
		return counts{}, false
	}
	n := w.seq.Add(1)
	slot := &w.ring[(n-1)%w.size]
	full := n > w.size
	var b uint64
	switch {
	case slot.Load() != flags:
		// An empty slot holds 0, the flags of a plain success.
		old := slot.Swap(flags)
		b = w.bad.Add(bad(flags) - bad(old))
	case full:
		return counts{}, false
	default:
		b = w.bad.Load()
	}
	c := counts{total: int(min(n, w.size)), failures: int(uint32(b)), slow: int(b >> 32)}
	if c.failures > c.total || c.slow > c.total {
		return counts{}, false
	}
	return c, true
}

// timeWindow holds the outcomes of the last len(buckets)*width of time in
// buckets of width each. Bucket index i covers the instants whose
// UnixNano/width is i and lives in buckets[i%len(buckets)]; a whole
// bucket drops out when time moves past it.
//
// A call adds to the head bucket (one atomic add for a success) and reads
// the sums of the other live buckets from the head, which holds them as
// they were when it became the head. Moving the head to a new bucket is
// rare (once per width at most) and takes mu: it clears the buckets that
// come back into use, sums the others, and publishes a new head.
//
// A call that read the old head just before a move adds to that bucket
// afterwards, where the sums in the new head miss it until the next move
// sums the buckets again: nothing is lost, and no sum drifts, because each
// move recounts from the buckets.
type timeWindow struct {
	width   int64 // nanoseconds
	buckets []bucket
	head    atomic.Pointer[timeHead]
	mu      sync.Mutex // serializes moves of the head
}

// bucket is a cache line: the newest bucket is written by every call.
type bucket struct {
	calls atomic.Uint64
	bad   atomic.Uint64 // failures | slow<<32
	_     [cacheLine - 16]byte
}

// timeHead is the newest bucket and what the rest of the window held when
// it became the newest. It is immutable once published.
type timeHead struct {
	idx   int64 // bucket index: UnixNano / width, rounded down
	end   int64 // (idx+1)*width: the first instant past this bucket
	b     *bucket
	older counts // sum of the other live buckets at the move
}

// noHead is the head of an unused window: every instant is past its end.
var noHead = &timeHead{end: -1 << 63}

func newTimeWindow(width int64, n int) *timeWindow {
	w := &timeWindow{width: width, buckets: make([]bucket, n)}
	w.head.Store(noHead)
	return w
}

// record adds one outcome at ns (UnixNano) and returns the window's counts
// after it. An outcome reported with a time older than the head (calls
// finish out of order) counts in the newest bucket: it is recent anyway.
func (w *timeWindow) record(ns int64, flags uint32) counts {
	h := w.head.Load()
	if ns >= h.end {
		h = w.advance(ns)
	}
	c := h.older
	c.total += int(h.b.calls.Add(1))
	var b uint64
	if flags != 0 {
		b = h.b.bad.Add(bad(flags))
	} else {
		b = h.b.bad.Load()
	}
	c.failures += int(uint32(b))
	c.slow += int(b >> 32)
	return c
}

// advance makes the bucket of ns the head, clearing the buckets between
// the old head and it (all of them after a quiet period of a whole
// window), and returns the new head.
func (w *timeWindow) advance(ns int64) *timeHead {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.head.Load()
	if ns < h.end {
		return h // another call moved it
	}
	idx := ns / w.width
	if ns < 0 && ns%w.width != 0 {
		idx-- // round down, so that buckets stay width wide before 1970 too
	}
	n := int64(len(w.buckets))
	if h == noHead || idx-h.idx >= n {
		for i := range w.buckets {
			w.buckets[i].clear()
		}
	} else {
		for i := h.idx + 1; i <= idx; i++ {
			w.buckets[mod(i, n)].clear()
		}
	}
	nb := &w.buckets[mod(idx, n)]
	nh := &timeHead{idx: idx, end: (idx + 1) * w.width, b: nb}
	for i := range w.buckets {
		if b := &w.buckets[i]; b != nb {
			bad := b.bad.Load()
			nh.older.total += int(b.calls.Load())
			nh.older.failures += int(uint32(bad))
			nh.older.slow += int(bad >> 32)
		}
	}
	w.head.Store(nh)
	return nh
}

func (b *bucket) clear() {
	b.calls.Store(0)
	b.bad.Store(0)
}

// mod is i mod n for n > 0, never negative.
func mod(i, n int64) int64 {
	m := i % n
	if m < 0 {
		m += n
	}
	return m
}
