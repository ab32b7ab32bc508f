// Package grpcclient lets a Go gRPC client use switchboard's discovery,
// balancing and resilience: a resolver for switchboard:///SERVICE targets,
// every balance policy as a gRPC balancer, and interceptors for the
// circuit breaker, retries, rate limits and fallbacks. It is built on the
// library packages (discovery, balance, breaker, retry, ratelimit,
// fallback); none of them is re-implemented here.
//
// # Resolving: switchboard:///orders
//
// A ResolverBuilder watches a service in a registry through a
// discovery.View and pushes every change to gRPC as it happens (there is
// no polling). The registry can be anything with a registry.Discoverer:
// registry/consul pointed at Consul or at switchboard's embedded registry
// (which speaks Consul's HTTP API), registry/etcd, registry/dns, or the
// embedded registry's in-process Discoverer. While the registry is down
// the view keeps serving the last known instances (and, with
// discovery.Options.CacheDir, survives a restart). While a service has no
// instance (or none is reachable), a call fails at once with Unavailable,
// unless it is made with grpc.WaitForReady(true): then it waits for an
// instance to register and connect, until its deadline.
//
//	reg, _ := consul.New(consul.Config{Address: "127.0.0.1:8500"})
//	rb, _ := grpcclient.NewResolverBuilder(reg, grpcclient.ResolverOptions{})
//	defer rb.Close()
//	cc, _ := grpc.NewClient("switchboard:///orders",
//		grpc.WithResolvers(rb), // or grpcclient.Register(rb) once at start-up
//		grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithDefaultServiceConfig(grpcclient.ServiceConfig("p2c_ewma", balance.Config{})))
//
// Only passing instances are resolved (ResolverOptions.IncludeUnhealthy
// changes that); switchboard:///orders?tag=v2 keeps the instances tagged
// v2. Each resolved endpoint carries the instance's weight, zone, metadata and ID as
// Attributes, which the balancers read; another resolver can set them with
// SetAttributes.
//
// # Balancing: switchboard_<policy>
//
// Every policy of package balance is registered as the gRPC balancer
// BalancerName(policy): switchboard_round_robin,
// switchboard_weighted_round_robin, switchboard_random,
// switchboard_weighted_random, switchboard_least_conn, switchboard_p2c,
// switchboard_p2c_ewma, switchboard_consistent_hash, switchboard_maglev and
// switchboard_dynamic_weight. A service config selects one, with the keys
// of the YAML balance block (docs/balancing.md) as a JSON object,
// durations as strings:
//
//	{"loadBalancingConfig":[{"switchboard_consistent_hash":
//	    {"hash_key":"metadata:x-user-id","bounded_load":1.25}}]}
//
// ServiceConfig writes that JSON from a balance.Config. A key the policy
// does not read, an unknown key or a bad value fails grpc.NewClient with an
// error naming the key. The connected (READY) subchannels are the
// policy's endpoints; the picker calls the policy's lock-free Pick, and
// gRPC's Done reports the call's outcome and latency back, so least_conn
// and p2c see in-flight calls, p2c_ewma latency, and dynamic_weight load
// reports from the x-switchboard-load trailer. A pick and its Done
// allocate nothing (see BenchmarkPick and docs/BENCHMARKS.md).
//
// switchboard_consistent_hash and switchboard_maglev key a call on, in
// order: the context value of WithHashKey (the allocation-free way for Go
// callers); with hash_key path, the full method name; otherwise the
// outgoing metadata named by hash_key (metadata:NAME or header:NAME,
// default metadata:x-switchboard-hash-key). A call without a key goes to
// the policy's fallback, or with missing_key error fails at once (also
// with WaitForReady) with ErrNoHashKey, which errors.Is also finds as
// balance.ErrNoHashKey. It is the caller's mistake: the breaker counts it
// neither way and the fallback interceptors leave it alone.
//
// # Resilience: interceptors
//
// The interceptors wrap the library's types, one idea each:
//
//   - UnaryBreaker, StreamBreaker: a breaker.Breaker for the service;
//     calls fail fast with ErrBreakerOpen while it is open. Which codes
//     count as failures is a Codes set (DefaultFailureCodes: Unavailable,
//     DeadlineExceeded, ResourceExhausted, Internal, Unknown); Canceled
//     and ErrNoHashKey count neither way. A stream counts once, when it
//     ends: at its end of stream or error, at the response of a
//     client-streaming call, or, abandoned, when its context ends.
//   - UnaryRetry, StreamRetry: a retry.Policy with a retry.Budget, for
//     methods declared idempotent, on Unavailable (configurable) and
//     per-try timeouts (an attempt that outlived its own per-try deadline,
//     not a DeadlineExceeded the server answers earlier), never past the
//     call's deadline; a retry goes to an endpoint not yet tried.
//   - UnaryRateLimit, StreamRateLimit: any ratelimit.Limiter; over the
//     limit a call is rejected with ErrRateLimited or waits (LimitMode).
//   - UnaryFallback, StreamFallback: a chain of steps that answer a failed
//     call (a stream that failed before its first message, whose
//     messages in both directions then go to the fallback's stream); the
//     answer is marked degraded in the call's header and trailer metadata
//     (MetadataDegraded; read it with Degraded).
//
// Chain them outermost first, as the proxy's pipeline orders them:
//
//	grpc.WithChainUnaryInterceptor(
//		grpcclient.UnaryRateLimit(limiter, grpcclient.Reject),
//		grpcclient.UnaryFallback(0, steps...),
//		grpcclient.UnaryBreaker(br, 0),
//		retryInterceptor, // from grpcclient.UnaryRetry
//	)
package grpcclient
