package breaker

import (
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// mono has a monotonic clock reading, as time.Now() returns and the proxy
// passes.
var mono = time.Now()

// benchModes are the configurations the benchmarks measure, one per way of
// opening the breaker; peers_bench_test.go configures failsafe-go's nearest
// equivalent of each under the same name. The rate and consecutive modes
// track slow calls too (failsafe-go cannot), so ours do a little more work
// than the peer's there; failure-count is configured as its users write it
// ("5 failures within a minute", nothing else).
// timed marks the modes whose window is a time window: failsafe-go reads
// the clock inside for those, so ours are also measured with a time.Now()
// per call, besides with the time given, as the proxy calls them.
var benchModes = []struct {
	name  string
	cfg   Config
	timed bool
}{
	{"count", Config{SlowThreshold: time.Second}, false},                               // rate over the last 100 calls
	{"time", Config{WindowType: WindowTime, SlowThreshold: time.Second}, true},         // rate over the last minute
	{"consecutive", Config{ConsecutiveFailures: 5, SlowThreshold: time.Second}, false}, // 5 failures in a row
	{"failure-count", Config{WindowType: WindowTime, FailureCount: 5}, true},           // 5 failures within a minute
}

// benchOurs measures Allow + Done on a closed breaker of cfg: the request
// path's whole cost. Every call succeeds, or with mixed one in 100 fails
// (too few to open the breaker). With clock, each call reads time.Now()
// first, as a caller without the time at hand would; without, the time
// advances by 1µs a call.
func benchOurs(b *testing.B, cfg Config, clock, parallel, mixed bool) {
	br := newBench(b, cfg)
	ok := endpoint.Outcome{Status: 200, Latency: time.Millisecond}
	failed := endpoint.Outcome{Status: 503, Latency: time.Millisecond}
	b.ReportAllocs()
	// loop is one goroutine's calls; each has its own clock and count (a
	// shared one would add a contended atomic to every call).
	loop := func(next func() bool) {
		now := mono
		for i := 0; next(); i++ {
			if clock {
				now = time.Now()
			} else {
				now = now.Add(time.Microsecond)
			}
			o := ok
			if mixed && i%100 == 99 {
				o = failed
			}
			t, _ := br.Allow(now)
			t.Done(o, now)
		}
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
	} else {
		loop(b.Loop)
	}
}

// BenchmarkAllowDone is the rest of our request path; the closed state's
// cost per mode, against failsafe-go, is BenchmarkModes.
func BenchmarkAllowDone(b *testing.B) {
	b.Run("refused", func(b *testing.B) {
		br := newBench(b, Config{OpenFor: time.Hour, MaxOpenFor: time.Hour})
		br.mu.Lock()
		br.openLocked(mono, time.Hour, "bench")
		br.mu.Unlock()
		b.ReportAllocs()
		for b.Loop() {
			br.Allow(mono)
		}
	})
}

func newBench(b *testing.B, cfg Config) *Breaker {
	br, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkClock is the cost of the time.Now() in the switchboard+now rows
// of BenchmarkModes, measured in the same run: on virtual machines it can
// be most of those rows, and it need not scale with cores.
func BenchmarkClock(b *testing.B) {
	var sink int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += time.Now().UnixNano()
			}
			if s == 42 {
				b.Log(s) // keeps the loop from being optimized away
			}
		})
	})
	if sink == 42 {
		b.Log(sink)
	}
}
