// Package h1loop is the event-loop HTTP/1.1 front end of issue 15: it
// serves the common request on proxy/evloop loops, client and upstream
// connections of one exchange on the same loop, with no goroutine per
// request, and hands every other request's connection to the goroutine
// engine (proxy/h1's Server) at that request.
//
// What it serves itself: an HTTP/1.1 request whose head proxy/h1's fast
// parser takes (h1.ParseRequestHead: origin-form target, token names,
// clean values, exactly one valid non-empty Host, at most one plain Content-Length,
// no Transfer-Encoding), within the header cap, with no Expect, no Upgrade,
// not CONNECT, and a body of at most MaxBody bytes already in the read
// buffer; and only when the Handler takes it (Handler.Begin returns an
// Exchange). Keep-alive and pipelining work as with proxy/h1's Server:
// requests are answered in order, one at a time.
//
// Everything else (HTTP/1.0, a protocol switch, 100-continue, a chunked or
// large request body, a head the fast parser refuses, a request whose
// route needs a feature the loop does not have) goes to the goroutine
// engine: the loop hands the connection over (evloop.Loop.Handoff) at the
// start of that request, with the bytes it read still to be read, so the
// goroutine engine parses the same bytes with its own, complete checks.
// Only what the fast parser accepts is ever served here, a strict subset
// of what the goroutine engine accepts, read the same way: the loop adds
// no request-smuggling surface.
//
// The pipeline is driven step by step (pipeline.Route.Begin): an attempt
// is sent on a pooled keep-alive connection of the loop (or a new one,
// connected without blocking), a wait is a loop timer, a blocking step
// runs on a goroutine whose result comes back through evloop.Loop.Post.
// The response body is relayed as it comes, with flow control: when the
// client's socket is full the loop stops reading the upstream, so a slow
// client never makes the proxy hold more than one read buffer of a
// response. Content-Length, chunked (passed through as it came) and
// close-delimited bodies are relayed; a response to a fallback step comes
// from the pipeline whole.
//
// Timeouts are loop timers: the read-header and idle timeouts of the
// client connection, the upstream's connect and response-header timeouts,
// the attempt's deadline (the route's timeout), and a client that stops
// reading for the idle timeout. Those that move with every request are
// evloop.Deadlines: no timer heap operation per request.
//
// Per request on the common path: no allocation of the loop's own (the
// request head, the exchange, the attempt, the header maps, the first
// response's memory and the Handler's state are the connection's, reused:
// Handler.Begin gets the last Exchange back, and the request's strings are
// valid until its exchange is Done) and about four system calls (a read
// and a write on each side: connections are registered once,
// edge-triggered, a short read means the socket is empty, and a response
// head goes out with its body). A client connection that waits for its
// next request holds no read buffer: the loop keeps them.
//
// Linux only (epoll); elsewhere New reports evloop.ErrUnavailable.
package h1loop
