package retry

import (
	"reflect"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestPolicyDecodesFromYAMLKeys(t *testing.T) {
	const doc = `
attempts: 4
per_try_timeout: 2s
backoff_base: 10ms
backoff_max: 1s
retry_on: [connect_failure, timeout]
statuses: [503]
retry_non_idempotent: true
body_limit: 1024
budget_percent: 10
budget_window: 30s
min_retries_per_second: 5
`
	var p Policy
	if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	want := Policy{
		Attempts: 4, PerTryTimeout: 2 * time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: time.Second,
		RetryOn: []string{"connect_failure", "timeout"}, Statuses: []int{503}, RetryNonIdempotent: true,
		BodyLimit: 1024, BudgetPercent: 10, BudgetWindow: 30 * time.Second, MinRetriesPerSecond: 5,
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v\nwant    %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Conditions() != ConnectFailure|Timeout {
		t.Fatalf("Conditions = %v", p.Conditions())
	}
}
