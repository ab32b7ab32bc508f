package clock

import "time"

// epoch is the origin of Nanos: a time.Now reading taken when the process
// starts. Because it carries a monotonic reading, t.Sub(epoch) uses the
// monotonic clock for every t that has one too (those from time.Now), so a
// step of the wall clock neither freezes nor frees state kept in Nanos.
var epoch = time.Now()

// Nanos returns t as nanoseconds since the process's epoch: a compact,
// monotonic form of a time for state kept in an int64 (token buckets,
// EWMA stamps). Times without a monotonic reading (time.Date, a Fake's)
// are measured on the wall clock, and those before the epoch are negative.
func Nanos(t time.Time) int64 { return int64(t.Sub(epoch)) }

// NowNanos returns Nanos(c.Now()). For Real it reads only the monotonic
// clock (time.Since), which costs about half as much as time.Now: it is
// the thin wrapper for hot paths that keep time in Nanos.
func NowNanos(c Clock) int64 {
	if _, ok := c.(realClock); ok {
		return int64(time.Since(epoch))
	}
	return Nanos(c.Now())
}

// Time is the inverse of Nanos: the time n nanoseconds after the epoch.
// It carries a monotonic reading, so comparing it with a time.Now reading
// uses the monotonic clock; its wall reading is the epoch's plus n, which
// differs from time.Now's by any step of the wall clock since the epoch.
func Time(n int64) time.Time { return epoch.Add(time.Duration(n)) }
