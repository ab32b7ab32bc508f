package breaker

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"
)

// The peers are test-only dependencies: they run in the same benchmark run
// as ours so that the numbers are comparable. Each is configured as close
// to our default as its API allows (a failure rate over a minute) and
// measured on its success path, like BenchmarkAllowDone.
func BenchmarkPeers(b *testing.B) {
	b.Run("gobreaker-Execute", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Interval: time.Minute})
		req := func() (struct{}, error) { return struct{}{}, nil }
		b.ReportAllocs()
		for b.Loop() {
			cb.Execute(req)
		}
	})
	b.Run("gobreaker-TwoStep", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{Interval: time.Minute})
		b.ReportAllocs()
		for b.Loop() {
			done, _ := cb.Allow()
			done(nil)
		}
	})
	b.Run("failsafe-go-time", func(b *testing.B) {
		cb := circuitbreaker.NewBuilder[any]().WithFailureRateThreshold(0.5, 20, time.Minute).Build()
		b.ReportAllocs()
		for b.Loop() {
			if cb.TryAcquirePermit() {
				cb.RecordSuccess()
			}
		}
	})
	b.Run("failsafe-go-count", func(b *testing.B) {
		cb := circuitbreaker.NewBuilder[any]().WithFailureThresholdRatio(50, 100).Build()
		b.ReportAllocs()
		for b.Loop() {
			if cb.TryAcquirePermit() {
				cb.RecordSuccess()
			}
		}
	})
}
