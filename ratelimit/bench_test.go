package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// The comparisons with golang.org/x/time/rate and go.uber.org/ratelimit
// are test-only: they run in the same benchmark run as ours so that the
// numbers are comparable. uber-go/ratelimit is a pacer (Take blocks until
// the next slot) rather than an Allow/deny limiter; at 1e9/s its Take never
// sleeps and measures its bookkeeping and clock read.

// mono is a time with a monotonic clock reading, as time.Now() returns and
// the proxy passes: Sub between two such times is cheaper than between
// wall-clock times like mono.
var mono = time.Now()

// The admitted path: the clock advances one interval per call, so every
// call is admitted (and a bucket's CAS succeeds).
func BenchmarkTokenBucketAllowN(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		l := NewTokenBucket(Rate{N: 1, Per: time.Nanosecond}, 100)
		now := mono
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			l.AllowN(now, 1)
		}
	})
	b.Run("serial-rejected", func(b *testing.B) {
		l := NewTokenBucket(Rate{N: 1, Per: time.Hour}, 100)
		l.AllowN(mono, 100)
		b.ReportAllocs()
		for b.Loop() {
			l.AllowN(mono, 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := NewTokenBucket(Rate{N: 1, Per: time.Nanosecond}, 100)
		var clock atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.AllowN(mono.Add(time.Duration(clock.Add(1))), 1)
			}
		})
	})
	b.Run("Allow-time.Now", func(b *testing.B) {
		l := NewTokenBucket(Rate{N: 1, Per: time.Nanosecond}, 100)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
}

func BenchmarkXTimeRateAllowN(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e9), 100)
		now := mono
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond)
			l.AllowN(now, 1)
		}
	})
	b.Run("serial-rejected", func(b *testing.B) {
		l := rate.NewLimiter(rate.Every(time.Hour), 100)
		l.AllowN(mono, 100)
		b.ReportAllocs()
		for b.Loop() {
			l.AllowN(mono, 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e9), 100)
		var clock atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.AllowN(mono.Add(time.Duration(clock.Add(1))), 1)
			}
		})
	})
	b.Run("Allow-time.Now", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e9), 100)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
}

func BenchmarkUberRatelimitTake(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		l := uber.New(1_000_000_000)
		b.ReportAllocs()
		for b.Loop() {
			l.Take()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := uber.New(1_000_000_000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Take()
			}
		})
	})
}

func BenchmarkLimitersAllowN(b *testing.B) {
	for name, l := range map[string]Limiter{
		"leaky_bucket":           NewLeakyBucket(Rate{N: 1, Per: time.Nanosecond}, 100, 0),
		"fixed_window":           NewFixedWindow(Rate{N: 1 << 30, Per: time.Hour}),
		"sliding_window-counter": NewSlidingWindow(Rate{N: 1 << 30, Per: time.Hour}),
		"sliding_window-log":     NewSlidingLog(Rate{N: 1000, Per: time.Microsecond}),
	} {
		b.Run(name, func(b *testing.B) {
			now := mono
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Nanosecond)
				l.AllowN(now, 1)
			}
		})
	}
}

// BenchmarkKeyedAllowN: a token bucket per key over 100k existing keys.
// The keys are visited in order, so the key strings themselves are in
// cache as a key just read from a request would be; the table slots are
// still visited in random order, since a key's slot is chosen by its hash.
func BenchmarkKeyedAllowN(b *testing.B) {
	const nkeys = 100_000
	k, err := NewKeyed(Config{Rate: "1/ns", Burst: 100, Key: "client_ip", MaxKeys: 2 * nkeys})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + "-" + strconv.Itoa(i)
		k.AllowN(keys[i], mono, 1)
	}
	if k.Len() != nkeys {
		b.Fatalf("Len = %d, want %d", k.Len(), nkeys)
	}
	b.Run("serial", func(b *testing.B) {
		now, i := mono, 0
		b.ReportAllocs()
		for b.Loop() {
			if i++; i == nkeys {
				i = 0
			}
			now = now.Add(time.Nanosecond)
			k.AllowN(keys[i], now, 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var clock, seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 40_000 % nkeys
			for pb.Next() {
				if i++; i == nkeys {
					i = 0
				}
				k.AllowN(keys[i], mono.Add(time.Duration(clock.Add(1))), 1)
			}
		})
	})
	b.Run("serial-random-keys", func(b *testing.B) {
		now, i := mono, 0
		b.ReportAllocs()
		for b.Loop() {
			i = (i + 7919) % nkeys
			now = now.Add(time.Nanosecond)
			k.AllowN(keys[i], now, 1)
		}
	})
}

func BenchmarkConcurrencyAcquire(b *testing.B) {
	l, _ := NewConcurrency(ConcurrencyConfig{MaxInFlight: 1 << 20})
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			release, _ := l.Acquire(ctx)
			release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				release, _ := l.Acquire(ctx)
				release()
			}
		})
	})
}

// Wait when a token is available: the bucket refills far faster than the
// loop takes tokens, so neither limiter sleeps; this measures the
// reservation and clock reads against x/time/rate's Limiter.Wait.
func BenchmarkWaitTokenAvailable(b *testing.B) {
	ctx := context.Background()
	b.Run("switchboard", func(b *testing.B) {
		l := NewTokenBucket(Rate{N: 1, Per: time.Nanosecond}, 1_000_000)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Wait(ctx, l, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e9), 1_000_000)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
