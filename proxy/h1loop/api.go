package h1loop

import (
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
)

// Handler decides the requests the loop parsed. It is called on a loop
// and must not block.
type Handler interface {
	// Begin takes a parsed request (RemoteAddr set, Body the request's
	// whole body or http.NoBody) and returns the exchange to run, or nil
	// when the goroutine engine is to serve it: the loop then hands the
	// connection over, the request's bytes unread. Begin may change r.
	//
	// prev is the exchange Begin returned for the connection's previous
	// request (nil for its first), which the loop is done with: Begin
	// may reuse it, so that a keep-alive connection's requests cost no
	// allocation of their own. r's context is the connection's: it ends
	// when the client goes away or the server closes.
	//
	// r, its header and its strings live in the connection's memory
	// (h1.Reuse): they are valid until the exchange is Done, after which
	// the connection's next request is parsed over them. What keeps one
	// longer (a queued log record, a map key) keeps a copy. An exchange
	// whose call went off the loop (a blocking step, a hedge) leaves
	// that memory to it: the next request gets new.
	Begin(r *http.Request, now time.Time, prev Exchange) Exchange
}

// Exchange is one request the loop serves: the pipeline call to drive,
// and the front end's part of the answer.
type Exchange interface {
	// Call is the route and the call prepared for Route.Begin (Req, Body
	// and Front set; Req's header as it goes upstream), and how to reach
	// the route's endpoints.
	Call() (*pipeline.Route, *pipeline.Call, Upstream)
	// Respond returns the header to send the client with resp, the
	// call's answer, the front end's fields added. The loop leaves out
	// hop-by-hop fields (h1.HopByHopResponseField) and sets the framing
	// fields (Content-Length, Transfer-Encoding, Connection) itself.
	// The header may be resp.Header, changed in place: resp is the
	// loop's own (one it read, or a copy of one the pipeline made), and
	// the loop is done with its header once the head is sent.
	Respond(resp *http.Response) http.Header
	// Fail returns the proxy's own answer to a call that ended with err.
	// A status of pipeline.StatusClientClosed means no answer is sent.
	Fail(err error) (status int, header http.Header, body []byte)
	// Done ends the exchange: the status sent (499 when the client went
	// first), the body bytes read from the client and written to it, the
	// error that cut the response body short, if any, and the loop's
	// clock (as Begin's now: the time the loop last woke), so that the
	// end of a request costs no reading of the clock.
	Done(status int, in, out int64, bodyErr error, now time.Time)
}

// Upstream is how the loop reaches a route's endpoints over HTTP/1.1.
type Upstream struct {
	// ConnectTimeout bounds a connect (0: only the attempt's deadline).
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head after
	// the request was written (0: only the attempt's deadline).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes pooled connections idle for longer (0: never).
	IdleTimeout time.Duration
	// MaxIdlePerEndpoint caps the idle connections the loop keeps per
	// endpoint (0: none kept).
	MaxIdlePerEndpoint int
	// MaxResponseHeaderBytes caps a response head (0: 64 KiB).
	MaxResponseHeaderBytes int
	// Header, when not nil, observes each exchange's time to its response
	// head, in seconds.
	Header interface{ Observe(float64) }
}

// Settings are the client-side limits of a Server; they may change while
// it serves (SetSettings), each connection taking them for its next
// request.
type Settings struct {
	// ReadHeaderTimeout bounds reading a request head from its first
	// byte, and the wait for a connection's first request.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle for longer, and one
	// whose client stops reading a response for as long.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request head (0: 1 MiB, as proxy/h1's
	// Server); a longer one goes to the goroutine engine, which refuses it.
	MaxHeaderBytes int
	// MaxBody is the largest request body the loop takes itself, when it
	// has all arrived with its head (0: 64 KiB).
	MaxBody int
	// AcceptFailed, when set, is told of an accept that failed for want
	// of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM): that loop stops
	// watching the socket for retry, and the connections wait in the
	// accept queue (evloop.Acceptor). It runs on the loop.
	AcceptFailed func(err error, retry time.Duration)
}
