// Package fallback answers a request when its upstream cannot: a chain of
// steps tried in order, each of which may serve a degraded response.
//
// The generic core is First: run steps in order, return the first success
// and the name of the step that served it, or every error joined. The HTTP
// chain (Chain, built from a route's Config) is made of three kinds of step:
//
//   - backup: send the request to another upstream, by name. The library
//     only carries the name; the proxy implements Sender.
//   - stale: serve the last good response stored for the request's cache
//     key (the proxy uses the GET URL) if it is younger than max_age. Good
//     responses are recorded with Chain.Store into a bounded LRU Cache.
//   - static: a configured status, headers and body (inline or from a file).
//
// A chain runs only when triggered (Triggers): the route's breaker is open,
// no endpoint is healthy, retries are exhausted, or the upstream answered
// one of the configured status codes. Every response it serves carries
// X-Switchboard-Degraded: "<step>: <reason>", so that a front end can show
// it differently.
package fallback
