package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/switchboard-dev/switchboard/ratelimit"
)

// A token bucket of 3 that refills one token every 100ms: a burst of 3,
// then one request per 100ms.
func ExampleTokenBucket() {
	b := ratelimit.NewTokenBucket(ratelimit.Rate{N: 10, Per: time.Second}, 3)
	now := time.Unix(1_700_000_000, 0)
	for i := range 4 {
		res := b.AllowN(now, 1)
		fmt.Printf("request %d: allowed=%v remaining=%d retry-after=%v\n", i+1, res.Allowed, res.Remaining, res.RetryAfter)
	}
	res := b.AllowN(now.Add(100*time.Millisecond), 1)
	fmt.Printf("100ms later: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// request 1: allowed=true remaining=2 retry-after=0s
	// request 2: allowed=true remaining=1 retry-after=0s
	// request 3: allowed=true remaining=0 retry-after=0s
	// request 4: allowed=false remaining=0 retry-after=100ms
	// 100ms later: allowed=true remaining=0
}

// A limiter built from configuration, as the proxy does for a route's
// rate_limit entry.
func ExampleNew() {
	l, err := ratelimit.New(ratelimit.Config{Algorithm: "sliding_window", Rate: "2/s"})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Unix(1_700_000_000, 0)
	fmt.Println(l.AllowN(now, 1).Allowed, l.AllowN(now, 1).Allowed, l.AllowN(now, 1).Allowed)

	_, err = ratelimit.New(ratelimit.Config{Rate: "0/s", Burst: 1})
	fmt.Println(err)
	// Output:
	// true true false
	// rate: must be N/UNIT like 100/s, got "0/s": N must be at least 1
}

// One limiter per client address; behind a load balancer at 10.0.0.0/8,
// the client is read from X-Forwarded-For.
func ExampleKeyed() {
	k, err := ratelimit.NewKeyed(ratelimit.Config{
		Rate: "1/m", Burst: 1,
		Key: "client_ip", TrustedProxies: []string{"10.0.0.0/8"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Unix(1_700_000_000, 0)
	for _, client := range []string{"203.0.113.5", "203.0.113.5", "198.51.100.7"} {
		fmt.Println(client, k.AllowN(client, now, 1).Allowed)
	}
	// Output:
	// 203.0.113.5 true
	// 203.0.113.5 false
	// 198.51.100.7 true
}
