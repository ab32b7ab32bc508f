package retry_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/switchboard-dev/switchboard/retry"
)

func ExampleDo() {
	policy := retry.Policy{Attempts: 3, BackoffBase: 1, BackoffMax: 1} // tiny backoff for the example
	if err := policy.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	budget := retry.NewBudget(policy) // one per upstream, shared by all calls

	statuses := []int{503, 502, 200} // what the upstream answers, in turn
	err := retry.Do(context.Background(), policy, budget, func(ctx context.Context, attempt int) (bool, error) {
		status := statuses[attempt]
		fmt.Println("attempt", attempt, "status", status)
		if status >= 500 {
			return policy.RetryStatus(status), fmt.Errorf("upstream answered %d", status)
		}
		return false, nil
	})
	fmt.Println("err:", err)
	// Output:
	// attempt 0 status 503
	// attempt 1 status 502
	// attempt 2 status 200
	// err: <nil>
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
