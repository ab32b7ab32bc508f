package retry_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/retry"
)

func ExamplePolicy_BackoffCeiling() {
	policy := retry.Policy{BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond}
	for n := 0; n < 5; n++ {
		// The wait before retry n is uniform in [0, ceiling]: full jitter.
		fmt.Println("retry", n, "waits at most", policy.BackoffCeiling(n))
	}
	// Output:
	// retry 0 waits at most 25ms
	// retry 1 waits at most 50ms
	// retry 2 waits at most 100ms
	// retry 3 waits at most 200ms
	// retry 4 waits at most 250ms
}

func ExampleRetryable() {
	post := http.Header{}
	fmt.Println(retry.Retryable(http.MethodGet, nil, false))
	fmt.Println(retry.Retryable(http.MethodPost, post, false))
	post.Set("Idempotency-Key", "order-42")
	fmt.Println(retry.Retryable(http.MethodPost, post, false))
	// Output:
	// true
	// false
	// true
}

func ExamplePolicy_Validate() {
	err := retry.Policy{Attempts: -1, BudgetPercent: -20}.Validate()
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fmt.Println(e)
	}
	// Output:
	// attempts: must be at least 1 (the first try counts), got -1
	// budget_percent: must be between 0 and 100 (20 = one retry per five requests), got -20
}
