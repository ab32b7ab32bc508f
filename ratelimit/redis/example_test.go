package redis_test

import (
	"context"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/ratelimit/redis"
)

// A global limit of 1000 requests per second per API key, shared by three
// switchboard processes; while Redis is unreachable each admits a third.
// (Not run: it needs a Redis server.)
func Example() {
	client := goredis.NewClient(&goredis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // required: lets the 50ms timeout bound reads
		MaxRetries:            -1,   // a retry cannot fit in 50ms anyway
	})
	limit := ratelimit.Config{Rate: "1000/s", Burst: 200}
	l, err := redis.New(client, limit, redis.Config{LocalShare: 0.34},
		redis.WithErrorHandler(func(err error) { slog.Warn("global rate limit: redis failed", "err", err) }))
	if err != nil {
		panic(err)
	}
	res := l.AllowN(context.Background(), "api-key-42", time.Now(), 1)
	if !res.Allowed {
		slog.Info("rejected", "retry_after", res.RetryAfter)
	}
}
