package breaker

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// mono has a monotonic clock reading, as time.Now() returns and the proxy
// passes.
var mono = time.Now()

// Allow + Done on a closed breaker: the request path's whole cost.
func BenchmarkAllowDone(b *testing.B) {
	o := endpoint.Outcome{Status: 200, Latency: time.Millisecond}
	for _, wt := range []string{WindowCount, WindowTime} {
		b.Run(wt+"/serial", func(b *testing.B) {
			br, _ := New(Config{WindowType: wt, SlowThreshold: time.Second})
			now := mono
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				t, _ := br.Allow(now)
				t.Done(o, now)
			}
		})
		b.Run(wt+"/parallel", func(b *testing.B) {
			br, _ := New(Config{WindowType: wt, SlowThreshold: time.Second})
			var clock atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := mono.Add(time.Duration(clock.Add(int64(time.Microsecond))))
					t, _ := br.Allow(now)
					t.Done(o, now)
				}
			})
		})
	}
	b.Run("refused", func(b *testing.B) {
		br, _ := New(Config{OpenFor: time.Hour, MaxOpenFor: time.Hour})
		br.openLocked(mono, time.Hour, "bench")
		b.ReportAllocs()
		for b.Loop() {
			br.Allow(mono)
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		br, _ := New(Config{WindowType: WindowTime})
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			t, _ := br.Allow(now)
			t.Done(o, time.Now())
		}
	})
}
