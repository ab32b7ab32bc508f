package breaker

import (
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"
)

// The peers are test-only dependencies: they run in the same benchmark run
// as ours so that the numbers are comparable, on their success path like
// BenchmarkAllowDone.

// BenchmarkModes measures each of benchModes, serial and on all CPUs
// (RunParallel), ours and failsafe-go's nearest equivalent side by side so
// that each pair runs under the same load:
// BenchmarkModes/MODE/RUN/{switchboard,switchboard+now,failsafe-go}. RUN
// is serial or parallel with every call succeeding, as a healthy
// dependency's; or serial-mixed or parallel-mixed with one call in 100
// failing (not for failure-count, which that would open).
// switchboard+now, for the time-window modes only, adds a time.Now() per
// call, which failsafe-go reads inside for those.
func BenchmarkModes(b *testing.B) {
	peers := map[string]func() circuitbreaker.CircuitBreaker[any]{
		// 50 of the last 100 calls failed (it has no minimum of calls
		// for a count window).
		"count": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThresholdRatio(50, 100).Build()
		},
		// 50% of at least 20 calls in the last minute.
		"time": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureRateThreshold(0.5, 20, time.Minute).Build()
		},
		// 5 of the last 5 calls failed: 5 in a row.
		"consecutive": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).Build()
		},
		// 5 failures within a minute.
		"failure-count": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThresholdPeriod(5, time.Minute).Build()
		},
	}
	for _, m := range benchModes {
		for _, run := range []string{"serial", "parallel", "serial-mixed", "parallel-mixed"} {
			parallel := strings.HasPrefix(run, "parallel")
			mixed := strings.HasSuffix(run, "-mixed")
			if mixed && m.name == "failure-count" {
				continue
			}
			name := m.name + "/" + run
			b.Run(name+"/switchboard", func(b *testing.B) { benchOurs(b, m.cfg, false, parallel, mixed) })
			if m.timed {
				b.Run(name+"/switchboard+now", func(b *testing.B) { benchOurs(b, m.cfg, true, parallel, mixed) })
			}
			b.Run(name+"/failsafe-go", func(b *testing.B) { benchFailsafe(b, peers[m.name](), parallel, mixed) })
		}
	}
}

func benchFailsafe(b *testing.B, cb circuitbreaker.CircuitBreaker[any], parallel, mixed bool) {
	b.ReportAllocs()
	loop := func(next func() bool) {
		for i := 0; next(); i++ {
			if cb.TryAcquirePermit() {
				if mixed && i%100 == 99 {
					cb.RecordFailure()
				} else {
					cb.RecordSuccess()
				}
			}
		}
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
	} else {
		loop(b.Loop)
	}
}

// BenchmarkGobreaker is sony/gobreaker's default breaker (5 failures in a
// row, counts cleared every minute); it reads the clock inside.
func BenchmarkGobreaker(b *testing.B) {
	b.Run("Execute/serial", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Interval: time.Minute})
		req := func() (struct{}, error) { return struct{}{}, nil }
		b.ReportAllocs()
		for b.Loop() {
			cb.Execute(req)
		}
	})
	b.Run("TwoStep/serial", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{Interval: time.Minute})
		b.ReportAllocs()
		for b.Loop() {
			done, _ := cb.Allow()
			done(nil)
		}
	})
}
