// Package httpproxy is switchboard's HTTP front end: the listeners, the
// router, and a thin handler that runs each request through its route's
// pipeline.Route and relays the answer.
//
// A request goes: a listener's server (proxy/h1 for HTTP/1.x, cleartext or
// over TLS, whose handshake the listener completes itself; net/http for
// HTTP/2) -> Handler -> the listener's Table (first
// matching route by host, path prefix, methods and headers) -> the
// route's access control, if any (IP lists, CORS preflight, basic auth,
// forward auth: access.go) -> the request prepared for the upstream (hop-by-hop headers removed,
// X-Forwarded-For/-Proto/-Host, X-Request-Id kept or made) ->
// pipeline.Route.Do over the route's upstream, sending through a
// Transport -> the response streamed back (flushed when its length is
// unknown; a protocol switch tunnelled) or a pipeline.Error answered as
// JSON with its code and the X-Switchboard-Error header -> Route.Finish.
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
