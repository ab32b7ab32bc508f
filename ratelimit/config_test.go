package ratelimit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

func TestConfigErrorsAreClear(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		key  string
		msg  string
	}{
		{"zero rate", Config{Rate: "0/s", Burst: 1},
			"rate", `rate: must be N/UNIT like 100/s, got "0/s": N must be at least 1`},
		{"no rate", Config{Burst: 1},
			"rate", `rate: required, as N/UNIT like 100/s`},
		{"burst below 1", Config{Rate: "10/s", Burst: 0},
			"burst", `burst: must be at least 1, got 0`},
		{"negative burst", Config{Rate: "10/s", Burst: -3},
			"burst", `burst: must be at least 1, got -3`},
		{"unknown algorithm", Config{Algorithm: "gcra", Rate: "10/s"},
			"algorithm", `algorithm: "gcra" is unknown (known: token_bucket, leaky_bucket, fixed_window, sliding_window)`},
		{"unknown key source", Config{Rate: "10/s", Burst: 1, Key: "cookie:sid"},
			"key", `key: "cookie:sid" is unknown: want client_ip, header:NAME, path or route`},
		{"burst on a window", Config{Algorithm: "fixed_window", Rate: "10/s", Burst: 5},
			"burst", `burst: not used by fixed_window (only by token_bucket)`},
		{"leaky bucket without queue", Config{Algorithm: "leaky_bucket", Rate: "10/s"},
			"queue", `queue: must be at least 1, got 0`},
		{"negative max_wait", Config{Algorithm: "leaky_bucket", Rate: "10/s", Queue: 5, MaxWait: -time.Second},
			"max_wait", `max_wait: must not be negative, got -1s`},
		{"unknown variant", Config{Algorithm: "sliding_window", Rate: "10/s", Variant: "exact"},
			"variant", `variant: "exact" is unknown (known: auto, log, counter)`},
		{"trusted proxies without client_ip", Config{Rate: "10/s", Burst: 1, Key: "path", TrustedProxies: []string{"10.0.0.0/8"}},
			"trusted_proxies", `trusted_proxies: needs key client_ip`},
		{"bad trusted proxy", Config{Rate: "10/s", Burst: 1, Key: "client_ip", TrustedProxies: []string{"10.0.0.300"}},
			"trusted_proxies[0]", `trusted_proxies[0]: "10.0.0.300" is not an IP address or CIDR prefix`},
		{"max_keys without key", Config{Rate: "10/s", Burst: 1, MaxKeys: 10},
			"max_keys", `max_keys: needs key (client_ip, header:NAME, path or route)`},
		{"huge burst", Config{Rate: "1/h", Burst: 1 << 40},
			"burst", `burst: 1099511627776 at 1/h is more than 290 years of tokens`},
	} {
		err := tc.cfg.Validate()
		if err == nil || err.Error() != tc.msg {
			t.Errorf("%s: Validate:\n got %v\nwant %s", tc.name, err, tc.msg)
			continue
		}
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Path != tc.key {
			t.Errorf("%s: error is not a *field.Error for %q: %#v", tc.name, tc.key, err)
		}
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted the config", tc.name)
		}
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	err := Config{Algorithm: "token_bucket", Rate: "0/s", Burst: 0, Key: "ip"}.Validate()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate returned %T, want joined errors", err)
	}
	var keys []string
	for _, e := range joined.Unwrap() {
		keys = append(keys, e.(*field.Error).Path)
	}
	if got := strings.Join(keys, ","); got != "rate,burst,key" {
		t.Fatalf("problems reported for %s, want rate,burst,key", got)
	}
}

func TestNewBuildsEachAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Rate: "10/s", Burst: 5}, "*ratelimit.TokenBucket"},
		{Config{Algorithm: "leaky_bucket", Rate: "10/s", Queue: 5, MaxWait: time.Second}, "*ratelimit.LeakyBucket"},
		{Config{Algorithm: "fixed_window", Rate: "10/s"}, "*ratelimit.FixedWindow"},
		{Config{Algorithm: "sliding_window", Rate: "1000/s"}, "*ratelimit.SlidingLog"},
		{Config{Algorithm: "sliding_window", Rate: "1001/s"}, "*ratelimit.SlidingWindow"},
		{Config{Algorithm: "sliding_window", Rate: "10/s", Variant: "counter"}, "*ratelimit.SlidingWindow"},
		{Config{Algorithm: "sliding_window", Rate: "5000/s", Variant: "log"}, "*ratelimit.SlidingLog"},
	} {
		l, err := New(tc.cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", tc.cfg, err)
		}
		if got := typeName(l); got != tc.want {
			t.Errorf("New(%+v) = %s, want %s", tc.cfg, got, tc.want)
		}
	}
	// Keyed: the log only while max_keys logs stay within 64 MiB.
	for _, tc := range []struct {
		rate string
		want string
	}{{"83/s", "*ratelimit.SlidingLog"}, {"84/s", "*ratelimit.SlidingWindow"}} {
		k, err := NewKeyed(Config{Algorithm: "sliding_window", Rate: tc.rate, Key: "client_ip"})
		if err != nil {
			t.Fatal(err)
		}
		if got := typeName(k.newLimiter()); got != tc.want {
			t.Errorf("keyed sliding_window %s = %s, want %s", tc.rate, got, tc.want)
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *TokenBucket:
		return "*ratelimit.TokenBucket"
	case *LeakyBucket:
		return "*ratelimit.LeakyBucket"
	case *FixedWindow:
		return "*ratelimit.FixedWindow"
	case *SlidingWindow:
		return "*ratelimit.SlidingWindow"
	case *SlidingLog:
		return "*ratelimit.SlidingLog"
	}
	return "?"
}

func TestNewKeyedDefaults(t *testing.T) {
	k, err := NewKeyed(Config{Rate: "10/s", Burst: 1, Key: "client_ip", TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	src := k.Source()
	if src.Kind != KeyClientIP || len(src.TrustedProxies) != 1 || src.TrustedProxies[0].String() != "10.0.0.0/8" {
		t.Fatalf("Source = %+v", src)
	}
	total := 0
	for i := range k.buckets {
		total += k.buckets[i].cap
	}
	if total != DefaultMaxKeys || len(k.buckets) != 64 {
		t.Fatalf("%d shards with capacities summing to %d, want 64 summing to max_keys default %d", len(k.buckets), total, DefaultMaxKeys)
	}
	k, _ = NewKeyed(Config{Rate: "10/s", Burst: 1})
	if k.Source().Kind != KeyRoute {
		t.Fatalf("without key Source = %+v, want route", k.Source())
	}
}
