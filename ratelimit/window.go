package ratelimit

import (
	"math/bits"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// FixedWindow admits N events per window of length Per, the windows being
// aligned to the Unix epoch (a "5/m" window starts on the minute). It is
// the cheapest algorithm and the easiest to explain ("100 per minute,
// counter resets on the minute") but it allows a burst of 2N across a
// window edge: N at the end of one window and N more at the start of the
// next. SlidingWindow and SlidingLog do not.
//
// Create one with NewFixedWindow or New; the zero value is not usable.
type FixedWindow struct {
	mu     sync.Mutex
	window int64 // index of the current window: unix nanos / size
	count  int   // events admitted in it
	limit  int
	size   int64 // window length in nanoseconds
}

// NewFixedWindow returns a fixed-window limiter admitting r.N events per
// aligned window of r.Per. It panics if r is invalid.
func NewFixedWindow(r Rate) *FixedWindow {
	if err := r.valid(); err != nil {
		panic(err)
	}
	return &FixedWindow{window: fresh, limit: r.N, size: int64(r.Per)}
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (w *FixedWindow) Allow() bool { return w.AllowN(time.Now(), 1).Allowed }

// AllowN admits n events at now if the current window has room for them.
// It panics if n is negative.
func (w *FixedWindow) AllowN(now time.Time, n int) Result {
	checkN(n)
	t := now.UnixNano()
	idx := floorDiv(t, w.size)
	w.mu.Lock()
	// A time before the current window (the wall clock stepped back)
	// counts against the current window rather than resetting it.
	if idx > w.window {
		w.window, w.count = idx, 0
	}
	end := (w.window + 1) * w.size
	allowed := n <= w.limit-w.count
	if allowed {
		w.count += n
	}
	count := w.count
	w.mu.Unlock()

	res := Result{Allowed: allowed, Limit: w.limit, Remaining: w.limit - count, ResetAfter: time.Duration(end - t)}
	switch {
	case allowed:
	case n > w.limit:
		res.RetryAfter = InfDuration
	default:
		res.RetryAfter = res.ResetAfter
	}
	return res
}

// ReserveN is AllowN: a window limiter rejects rather than delays.
func (w *FixedWindow) ReserveN(now time.Time, n int) Result { return w.AllowN(now, n) }

// idle: a window that has ended holds no count that matters.
func (w *FixedWindow) idle(now time.Time) bool {
	idx := floorDiv(now.UnixNano(), w.size)
	w.mu.Lock()
	defer w.mu.Unlock()
	return idx > w.window || w.count == 0
}

// SlidingWindow is the sliding-window counter: it keeps the counts of the
// current and the previous aligned window and estimates the events in the
// sliding window ending at now as
//
//	previous * (time left in the current window / window) + current
//
// rounded up, admitting n events while the estimate plus n is at most N.
// It assumes the previous window's events were spread evenly; with them
// all at its very end an adversary can fit up to about 2N into one sliding
// window's length, but never the fixed window's 2N in an instant: right
// after a full window, the estimate is still about N. Memory is constant;
// use SlidingLog when the limit must be exact.
//
// Create one with NewSlidingWindow or New; the zero value is not usable.
type SlidingWindow struct {
	mu     sync.Mutex
	window int64 // index of the current window
	prev   int   // events admitted in window-1
	cur    int   // events admitted in window
	limit  int
	size   int64
}

// NewSlidingWindow returns a sliding-window counter admitting about r.N
// events per sliding window of r.Per. It panics if r is invalid.
func NewSlidingWindow(r Rate) *SlidingWindow {
	if err := r.valid(); err != nil {
		panic(err)
	}
	return &SlidingWindow{window: fresh, limit: r.N, size: int64(r.Per)}
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (w *SlidingWindow) Allow() bool { return w.AllowN(time.Now(), 1).Allowed }

// AllowN admits n events at now if the estimate leaves room for them. It
// panics if n is negative.
func (w *SlidingWindow) AllowN(now time.Time, n int) Result {
	checkN(n)
	t := now.UnixNano()
	idx := floorDiv(t, w.size)
	w.mu.Lock()
	switch {
	case idx == w.window+1:
		w.window, w.prev, w.cur = idx, w.cur, 0
	case idx > w.window:
		w.window, w.prev, w.cur = idx, 0, 0
	}
	start := w.window * w.size
	// elapsed is the part of the current window before t (0 if the clock
	// stepped back), left the part after it that the previous window
	// still overlaps.
	left := w.size - min(max(t-start, 0), w.size-1)
	weighted := mulDivCeil(w.prev, left, w.size)
	allowed := n <= w.limit-weighted-w.cur
	if allowed {
		w.cur += n
	}
	prev, cur := w.prev, w.cur
	w.mu.Unlock()

	end := start + w.size
	res := Result{Allowed: allowed, Limit: w.limit, Remaining: max(w.limit-weighted-cur, 0)}
	switch {
	case cur > 0: // cur weighs on the next window until its end
		res.ResetAfter = time.Duration(end + w.size - t)
	case prev > 0:
		res.ResetAfter = time.Duration(end - t)
	}
	switch {
	case allowed:
	case n > w.limit:
		res.RetryAfter = InfDuration
	case cur+n <= w.limit:
		// Later in this window: the previous window's weight must fall
		// to a = limit-cur-n, that is prev*(size-e)/size <= a.
		res.RetryAfter = time.Duration(start + w.size - mulDiv(w.limit-cur-n, w.size, int64(prev)) - t)
	case w.limit-n >= cur:
		// The next window has room from its start.
		res.RetryAfter = time.Duration(end - t)
	default:
		// In the next window cur becomes the previous count and must
		// weigh at most limit-n.
		res.RetryAfter = time.Duration(end + w.size - mulDiv(w.limit-n, w.size, int64(cur)) - t)
	}
	return res
}

// ReserveN is AllowN: a window limiter rejects rather than delays.
func (w *SlidingWindow) ReserveN(now time.Time, n int) Result { return w.AllowN(now, n) }

// idle: two windows on, both counts have expired.
func (w *SlidingWindow) idle(now time.Time) bool {
	idx := floorDiv(now.UnixNano(), w.size)
	w.mu.Lock()
	defer w.mu.Unlock()
	return idx > w.window+1 || (idx > w.window && w.cur == 0) || (w.prev == 0 && w.cur == 0)
}

// SlidingLog is the exact sliding window: it remembers the time of every
// admitted event of the last window and admits n more while fewer than
// N-n+1 are younger than the window. No span of length Per ever holds more
// than N events. It costs 8 bytes per remembered event (up to N), so it
// suits small limits; New picks it for sliding_window when N is at most
// LogMaxLimit.
//
// Create one with NewSlidingLog or New; the zero value is not usable.
type SlidingLog struct {
	mu    sync.Mutex
	times []int64 // ring buffer of admission times (nanos), oldest at head
	head  int
	count int
	limit int
	size  int64
}

// NewSlidingLog returns an exact sliding-window limiter admitting r.N
// events per sliding window of r.Per. It panics if r is invalid.
func NewSlidingLog(r Rate) *SlidingLog {
	if err := r.valid(); err != nil {
		panic(err)
	}
	return &SlidingLog{limit: r.N, size: int64(r.Per)}
}

// Allow is AllowN(time.Now(), 1).Allowed.
func (l *SlidingLog) Allow() bool { return l.AllowN(time.Now(), 1).Allowed }

// AllowN admits n events at now if fewer than N-n+1 events were admitted
// in the window (now-Per, now]. It panics if n is negative.
func (l *SlidingLog) AllowN(now time.Time, n int) Result {
	checkN(n)
	t := clock.Nanos(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(t)
	res := Result{Limit: l.limit}
	switch {
	case n <= l.limit-l.count:
		res.Allowed = true
		l.grow(l.count + n)
		for range n {
			l.times[(l.head+l.count)%len(l.times)] = t
			l.count++
		}
	case n > l.limit:
		res.RetryAfter = InfDuration
	default:
		// The (count+n-limit)th oldest event must leave the window first.
		k := l.count + n - l.limit
		res.RetryAfter = time.Duration(l.at(k-1) + l.size - t)
	}
	res.Remaining = l.limit - l.count
	if l.count > 0 {
		res.ResetAfter = time.Duration(l.at(l.count-1) + l.size - t)
	}
	return res
}

// ReserveN is AllowN: a window limiter rejects rather than delays.
func (l *SlidingLog) ReserveN(now time.Time, n int) Result { return l.AllowN(now, n) }

// at returns the i-th oldest remembered time.
func (l *SlidingLog) at(i int) int64 { return l.times[(l.head+i)%len(l.times)] }

// expire forgets the events at or before t-size. A time before the newest
// event (the clock stepped back) forgets nothing extra.
func (l *SlidingLog) expire(t int64) {
	for l.count > 0 && l.times[l.head] <= t-l.size {
		l.head = (l.head + 1) % len(l.times)
		l.count--
	}
	if l.count == 0 {
		l.head = 0
	}
}

// grow makes room for want events, doubling the ring up to the limit so
// that a log costs memory in proportion to its use.
func (l *SlidingLog) grow(want int) {
	if want <= len(l.times) {
		return
	}
	size := min(max(2*len(l.times), want, 8), l.limit)
	times := make([]int64, size)
	for i := range l.count {
		times[i] = l.at(i)
	}
	l.times, l.head = times, 0
}

// idle: with every event out of the window the log is as good as new.
func (l *SlidingLog) idle(now time.Time) bool {
	t := clock.Nanos(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count == 0 || l.at(l.count-1) <= t-l.size
}

// floorDiv is a/b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// mulDiv is floor(a*b/c) and mulDivCeil ceil(a*b/c) for a, b >= 0, c > 0
// and a*b/c < 2^63, without overflowing the product.
func mulDiv(a int, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

func mulDivCeil(a int, b, c int64) int {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int(q)
}
