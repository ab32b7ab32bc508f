package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
)

func Example() {
	b, err := breaker.New(breaker.Config{
		WindowSize:     10,
		MinRequests:    4,
		FailureRate:    0.5,
		OpenFor:        10 * time.Second,
		HalfOpenProbes: 1,
	})
	if err != nil {
		panic(err)
	}
	b.OnStateChange(func(from, to breaker.State, reason string, at time.Time) {
		fmt.Printf("%v -> %v: %s\n", from, to, reason)
	})

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(now time.Time, status int) {
		t, err := b.Allow(now)
		if errors.Is(err, breaker.ErrOpen) {
			fmt.Println("refused:", err)
			return
		}
		t.Done(endpoint.Outcome{Status: status, Latency: 5 * time.Millisecond}, now)
	}
	for _, status := range []int{200, 503, 200, 503} {
		call(start, status)
	}
	call(start.Add(time.Second), 200)
	call(start.Add(10*time.Second), 200)
	fmt.Println(b.State(start.Add(10 * time.Second)))
	// Output:
	// closed -> open: open: failure rate 50% over 4 calls
	// refused: breaker: open
	// open -> half-open: half-open: open for 10s elapsed
	// half-open -> closed: closed: 1 probe succeeded
	// closed
}
