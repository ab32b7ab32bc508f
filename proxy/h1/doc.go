// Package h1 is switchboard's HTTP/1.x engine: the server loop that reads
// requests from clients (Server) and the keep-alive client that sends them
// to endpoints (Client). The HTTP proxy runs the server for HTTP/1.x on
// cleartext and TLS listeners alike (a TLS listener completes the
// handshake itself and hands the connection over with ServeConn; HTTP/2
// stays on net/http), and the client towards HTTP/1.1 endpoints.
//
// # Server
//
// Server parses the common request head itself (parseRequestHead: an
// origin-form target net/url keeps as it is, HTTP/1.0 or 1.1, token field
// names and clean values without obs-fold, exactly one valid non-empty Host, at
// most one Content-Length of plain digits, no Transfer-Encoding, Trailer
// or Pragma, the whole head within the read buffer) into the
// *http.Request http.ReadRequest would make of it, in three allocations:
// one for the request with its URL, its body reader, its header values and
// its text (up to 12 values and 384 bytes), two for the header map. Every other head goes to the
// standard library's parser (http.ReadRequest: the same code, and so the
// same request-smuggling defences, as net/http's server: conflicting
// lengths, bad chunking, header syntax). The fast path is a strict subset
// of that parser, so it accepts nothing http.ReadRequest refuses and reads
// nothing another way (FuzzRequestHeadMatchesNetHTTP compares the two on
// the same bytes, field for field). Requests and their headers are not
// reused between requests: a hedge's losing attempt may still read them
// after the handler returned. The server adds the checks net/http's server
// makes after parsing (Host, protocol version, Expect, header field
// validity); a
// differential test holds its verdicts to net/http's. It is stricter than
// net/http where that is lenient, as nginx is: a request with both
// Content-Length and Transfer-Encoding, or with Transfer-Encoding on
// HTTP/1.0, is answered 400 and the connection closed. (http.ReadRequest
// drops those fields; the server reads them from the raw head.) What it leaves out is the per-request background read and
// context and the per-response header copy. The price: a client that goes
// away while its request waits on an upstream is noticed when the response
// is written, or at the route's timeout, not at once (as with HAProxy's
// default). Its limits (Settings: header and body read timeouts, idle
// timeout, header size) can change while it serves (SetSettings); every
// connection takes them for its next request. Responses keep the
// handler's Content-Length; a body without
// one is held back up to 2 KiB and given a length if it ends there, else
// sent chunked (with trailers). Pipelining, HTTP/1.0 keep-alive and
// 100-continue work as in net/http; Hijack hands the connection over for a
// protocol switch. A connection with a TLS state (a *tls.Conn) gives it to
// each of its requests in Request.TLS, taken once per connection.
//
// # Client
//
// Client writes the request and reads the response on the caller's
// goroutine (net/http.Transport runs two goroutines per connection and
// hands each exchange across channels). The common response head
// (parseResponseHead, sharing its field scanner with the request's:
// HTTP/1.1, a status from 200 to 599 other than 204 and 304, one
// Content-Length, no Transfer-Encoding, Trailer, Pragma or Connection:
// close, not an answer to HEAD, the head within the read buffer) is
// parsed in three allocations, its body read as net/http reads one of a
// known length (FuzzResponseHeadMatchesNetHTTP holds it to
// http.ReadResponse); every other head is parsed with
// http.ReadResponse. A response's Header keeps its Connection field as the
// endpoint sent it, also when it says close (which http.ReadResponse
// drops), so that the caller can remove the fields it names. The response
// head is capped (ClientConfig.MaxResponseHeaderBytes, 64 KiB by default):
// past it the exchange fails with ErrResponseHeaderTooLarge and the
// connection is closed. Idle connections are kept per endpoint, most recently
// used first, bounded by MaxIdlePerEndpoint and IdleTimeout. A reused
// connection is first checked with one non-blocking peek: one the endpoint
// closed is dropped, and so is one holding bytes nobody asked for (an
// endpoint whose body ran past its Content-Length), which would otherwise
// be read as the next request's response; a connection with bytes left in
// its buffer after a response is never pooled. A request on a reused
// connection that fails before any response byte is sent once more on a
// fresh connection when it can be (no body, idempotent method or
// Idempotency-Key), as net/http does; one that got any part of an answer
// is not. An upstream status below 100 is a
// malformed response.
package h1
