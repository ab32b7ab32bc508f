// Package redis is a global rate limit shared by many switchboard
// processes through Redis: a token bucket (GCRA) whose state, one
// timestamp per key, lives in Redis and is updated by a Lua script that
// reads the server's clock, so the processes' clocks need not agree.
//
// Every call is one EVALSHA (EVAL when the server has not seen the script),
// bounded by Config.Timeout (default 50ms): no request waits on Redis
// longer. When Redis fails, a fail_open limiter decides with a local token
// bucket per key at LocalShare of the global rate and burst, and a
// fail_closed one rejects. After a failure the limiter stops asking Redis
// for Config.Recheck (default 1s), then lets one request probe it. Each
// failure is counted (Failures) and passed to the WithErrorHandler
// callback, so that the proxy can export a metric and log.
//
// The client must be created with ContextTimeoutEnabled: true, or go-redis
// would ignore the per-call deadline on socket reads; New checks this for
// *redis.Client, *redis.ClusterClient and *redis.Ring.
package redis
