// Package client is switchboard for Go programs: an http.RoundTripper that
// calls services by name (http://orders/list) and gives every call the
// governance the proxy gives it — balancing over healthy instances, passive
// health and endpoint breakers, rate and concurrency limits, the route
// breaker, retries with a budget, hedging, and a fallback chain — in the
// caller's own process, with no hop in between.
//
// It is a thin front end over the same library as the proxy: each service
// is an upstream.Upstream (pool, balancer, health, endpoint breakers,
// discovery view), and each call runs through a pipeline.Route (limits,
// breaker, attempts, fallback). Settings mean what they mean in the proxy,
// in Go (upstream.Config, pipeline.Config) or in the proxy's YAML.
//
// # Declaring services
//
// New takes options. WithService declares a service: the host of the URLs
// that call it, its upstream (where its endpoints are and how they are
// chosen and judged) and its pipeline (how calls are protected):
//
//	c, err := client.New(
//		client.WithService("orders", client.Service{
//			Upstream: upstream.Config{
//				Targets: []endpoint.Spec{{Address: "10.0.0.1:8080"}, {Address: "10.0.0.2:8080"}},
//				Health:  upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 3}},
//			},
//			Pipeline: pipeline.Config{
//				Timeout: 2 * time.Second,
//				Retry:   &retry.Policy{Attempts: 3, PerTryTimeout: 500 * time.Millisecond},
//				Breaker: &breaker.Config{FailureRate: 0.5},
//			},
//		}),
//	)
//	defer c.Close()
//	resp, err := c.HTTPClient().Get("http://orders/list")
//
// A service's Routes give calls that match them (a path prefix, methods,
// headers) a pipeline of their own over the same upstream: retries for
// GETs, a tighter limit for POSTs. The first route that matches wins; the
// others get the service's Pipeline.
//
// # Finding endpoints: targets, registries, views
//
// A service's endpoints are its upstream's static Targets, or a View of a
// registry. WithRegistry gives the client any registry backend by name —
// registry/consul (against Consul, or switchboard's embedded registry,
// which speaks Consul's API), registry/etcd, registry/dns, registry/static,
// or a *registryd.Server's own Discoverer in the same process — and a
// service with neither Targets nor View is discovered in it (its name is
// the service name unless Service.Query says otherwise). The client
// watches each service through a discovery cache (package discovery):
// blocking queries bring a new instance within milliseconds, and while the
// registry is down the last known instances keep serving (with
// WithDiscoveryOptions' CacheDir, even across a restart).
//
// # Hosts that are not a service
//
// A request whose host is not a declared service goes to the base
// RoundTripper given with WithBase, or fails with an *UnknownServiceError
// naming the host and the declared services. Names match without regard
// to case or port. A service is called over http://, another scheme fails
// with ErrScheme: the service's configuration, not the URL, says how its
// endpoints are spoken to (cleartext HTTP/1.1, h2c, or TLS for an upstream
// with protocol https or a tls block in WithConfig's YAML).
//
// # Responses, errors and the degraded marker
//
// A response is the endpoint's, or a fallback step's in its place: then it
// carries the header X-Switchboard-Degraded ("STEP: REASON", such as
// "stale: breaker_open"), and Degraded returns it. Read the body to its end
// or close it, as always with net/http: that is when the call is finished —
// its outcome reaches passive health, the endpoint's and the route's
// breakers and the stale cache, and its concurrency slots are given back —
// exactly once.
//
// When there is no response, RoundTrip returns a *pipeline.Error (inside
// the *url.Error of an http.Client): its Status is what the proxy would
// answer (429, 502, 503, 504, ...), its Code a stable reason
// (pipeline.CodeRateLimited, CodeBreakerOpen, CodeNoEndpoint, ...), and
// RetryAfter, for a rate or concurrency limit, says when to come back:
//
//	var pe *pipeline.Error
//	if errors.As(err, &pe) && pe.Code == pipeline.CodeRateLimited {
//		time.Sleep(pe.RetryAfter)
//	}
//
// # Contexts
//
// The request's context bounds the whole call: a wait in a leaky bucket or
// a concurrency queue, every attempt, the backoff between attempts and a
// hedge. When it ends, the call stops where it is and the error wraps the
// context's error as well (errors.Is(err, context.DeadlineExceeded)). A
// route's Timeout bounds the call on top of it.
//
// WithHashKey puts a key in a context: a service balanced by
// consistent_hash or maglev sends every call with the same key to the same
// instance, in place of the key its hash_key finds in the request.
//
// # YAML
//
// LoadConfig and ParseConfig read the proxy's upstreams and routes (with
// the same keys, checks, defaults and FILE:LINE:COL problems), and
// WithConfig declares them:
//
//	upstreams:
//	  orders:
//	    balance: {policy: least_conn}
//	    discovery: {registry: consul, service: orders}
//	routes:
//	  - match: {path_prefix: /api, methods: [GET]}
//	    upstream: orders
//	    retry: {attempts: 3}
//
//	cfg, err := client.LoadConfig("client.yaml")
//	c, err := client.New(client.WithConfig(cfg), client.WithRegistry("consul", reg))
//
// # Metrics
//
// NewMetrics registers the proxy's metrics with a prometheus.Registerer,
// once, and WithMetrics hands them to a Client (several may share them),
// with the same names and labels as the proxy's: the upstreams' endpoint states, the pipelines' retries, errors,
// rate-limit decisions, breakers and fallbacks, the discovery caches', and
// switchboard_http_requests_total and _request_duration_seconds with
// listener="client", route and upstream, counted when a call is finished.
//
// docs/client.md walks through all of it with the examples
// examples/hash-by-user and examples/breaker-fallback.
package client
