package breaker

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"
)

// The peers are test-only dependencies: they run in the same benchmark run
// as ours so that the numbers are comparable, on their success path like
// BenchmarkAllowDone.

// BenchmarkFailsafe is failsafe-go's nearest equivalent of each of
// benchModes, under the same names.
func BenchmarkFailsafe(b *testing.B) {
	modes := map[string]func() circuitbreaker.CircuitBreaker[any]{
		// 50 of the last 100 calls failed (it has no minimum of calls
		// for a count window).
		"count": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThresholdRatio(50, 100).Build()
		},
		// 50% of at least 20 calls in the last minute; reads the clock
		// on every recorded call.
		"time": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureRateThreshold(0.5, 20, time.Minute).Build()
		},
		// 5 of the last 5 calls failed: 5 in a row.
		"consecutive": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).Build()
		},
		// 5 failures within a minute; reads the clock on every recorded
		// call.
		"failure-count": func() circuitbreaker.CircuitBreaker[any] {
			return circuitbreaker.NewBuilder[any]().WithFailureThresholdPeriod(5, time.Minute).Build()
		},
	}
	for _, m := range benchModes {
		build := modes[m.name]
		b.Run(m.name+"/serial", func(b *testing.B) {
			cb := build()
			b.ReportAllocs()
			for b.Loop() {
				if cb.TryAcquirePermit() {
					cb.RecordSuccess()
				}
			}
		})
		b.Run(m.name+"/parallel", func(b *testing.B) {
			cb := build()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if cb.TryAcquirePermit() {
						cb.RecordSuccess()
					}
				}
			})
		})
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
