// Package httpproxy is switchboard's HTTP front end: the listeners, the
// router, and a thin handler that runs each request through its route's
// pipeline.Route and relays the answer.
//
// A request goes: a listener's server (proxy/h1 for HTTP/1.x, cleartext or
// over TLS, whose handshake the listener completes itself with the
// certificate its CertSource chooses by SNI; net/http for HTTP/2, by ALPN
// over TLS or by prior knowledge in cleartext, h2c) -> Handler (HSTS,
// redirect_https, the client certificate header) -> the listener's Table (first
// matching route by host, path prefix, methods and headers) -> the
// route's access control, if any (IP lists, CORS preflight, basic auth,
// forward auth: access.go) -> the request prepared for the upstream (hop-by-hop headers removed,
// X-Forwarded-For/-Proto/-Host, X-Request-Id kept or made) ->
// pipeline.Route.Do over the route's upstream, sending through a
// Transport -> the response streamed back (flushed when its length is
// unknown; a protocol switch tunnelled) or a pipeline.Error answered as
// JSON with its code and the X-Switchboard-Error header -> Route.Finish.
//
// A route may send to several upstreams: a weighted split, sticky by a
// request key or not, and a canary that requests opt into by a header or
// cookie. It then has one pipeline per upstream (keys: the route's name,
// TargetKey), sharing the route's protections, and the request's series
// count under the upstream chosen. A mirror sends copies of a share of the
// requests through a pipeline of its own (MirrorKey), from goroutines the
// Server owns, never delaying the primary; a sticky cookie pins a client
// to the endpoint that answered it (pipeline.Call.Prefer).
//
// Server holds the listeners and swaps their tables. Prepare builds a
// configuration's tables, loads its certificates and binds its new
// sockets without touching what runs; Commit swaps them in (a kept
// listener keeps its socket and connections: new timeouts and limits
// reach the HTTP/1 engine's connections in place, while a TLS listener's
// new HTTP/2 connections get a new net/http server and the old one
// retires without closing a connection under a request); Discard drops
// them. Transport sends to one upstream's endpoints over the HTTP/1
// engine's keep-alive client, or over cleartext HTTP/2 (h2c).
package httpproxy
