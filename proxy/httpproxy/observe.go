package httpproxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/retry"
)

// observation is what the access log and tracing see of one request,
// kept in its reqState so that observing costs no allocation of its own.
// The Transport fills in the attempts; hedged attempts run concurrently,
// hence the atomics. With the access log and tracing both off, on is
// false and nothing here is touched.
type observation struct {
	on bool
	// attempts counts the exchanges sent to the route's upstream
	// (retries and hedges included, backup fallback steps not).
	attempts atomic.Int32
	inflight atomic.Int32 // attempts running now: one that starts beside another is a hedge
	// outcome is how the latest finished attempt ended (outcome*), for
	// the retry reason of the next.
	outcome atomic.Uint32
	// ttfb is, in nanoseconds, how long the latest attempt that got a
	// response waited for its head after it was sent.
	ttfb atomic.Int64
	// out counts the response body bytes written, the proxy's own
	// answers included (bytes_in is the result's: reqState.in).
	out countingWriter

	// Tracing (nil tracer: off).
	tracer *Tracer
	span   trace.Span      // the request's server span
	ctx    context.Context // carries span
}

// How an attempt ended, for the next attempt's retry reason: one of
// these, or outcomeStatus plus the response's status code.
const (
	outcomeNone = iota
	outcomeConnect
	outcomeTimeout
	outcomeReset
	outcomeStatus = 1000
)

// observe starts observing the request: w counts the bytes of the
// response body, and with tracing on, r carries the server span. The
// caller continues with the returned w and r.
func (st *reqState) observe(t *Table, w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	o := &st.obs
	o.on = true
	o.out.ResponseWriter = w
	if t.tracer != nil {
		r = t.tracer.startServer(st, r, t.listener)
	}
	return &o.out, r
}

// noteOutcome records how an attempt ended.
func (o *observation) noteOutcome(resp *http.Response, err error) {
	if err == nil {
		o.outcome.Store(outcomeStatus + uint32(resp.StatusCode))
		return
	}
	switch c := retry.Classify(err); {
	case c == retry.ConnectFailure:
		o.outcome.Store(outcomeConnect)
	case c == retry.Timeout:
		o.outcome.Store(outcomeTimeout)
	default:
		o.outcome.Store(outcomeReset)
	}
}

// observed ends the observation of a request once it is answered: the
// access log line and the end of the server span.
func (h *Handler) observed(t *Table, st *reqState, w http.ResponseWriter, r *http.Request, rt *route, tg *target, res result, start time.Time) {
	o := &st.obs
	if !o.on {
		return
	}
	if t.accessLog {
		h.access(st, w, r, rt, tg, res, start)
	}
	if o.span != nil {
		o.tracer.endServer(st, w, r, rt, tg, res)
	}
}

// access writes the access log line of a request served by the
// goroutine engine.
func (h *Handler) access(st *reqState, w http.ResponseWriter, r *http.Request, rt *route, tg *target, res result, start time.Time) {
	if h.out != nil {
		if !h.out.enabled() {
			return
		}
	} else if !h.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	o := &st.obs
	l := accessLine{
		status: res.status, attempts: st.call.Attempts(), took: time.Since(start), ttfb: time.Duration(o.ttfb.Load()),
		in: res.in, out: o.out.n, requestID: st.vals[2],
	}
	if v := w.Header()[fallback.HeaderDegraded]; len(v) > 0 {
		l.degraded = v[0]
	}
	if o.span != nil {
		l.traceID = o.span.SpanContext().TraceID().String()
	}
	l.request(h, r, rt, tg, res.ep)
	if h.out != nil {
		h.out.write(time.Now(), &l)
		return
	}
	var af accessFields
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "access", l.attrs(&af)...)
}

// accessLine is what the access log line of a request says: what an
// engine knows of the request at its end, and what request sets from the
// request and its route.
type accessLine struct {
	listener, remote, method, host, path, query, proto, userAgent string

	status    int
	route     string
	upstream  string
	endpoint  string
	attempts  int
	took      time.Duration // from the request's start to its answer
	ttfb      time.Duration // the latest attempt's wait for its response head
	in, out   int64         // body bytes read from the client, written to it
	requestID string
	degraded  string // the response's X-Switchboard-Degraded
	traceID   string // "" without tracing
}

// request sets the fields of l that come from request r of listener h,
// answered over route rt (nil: none matched) and target tg (nil: none)
// by endpoint ep (nil: none).
func (l *accessLine) request(h *Handler, r *http.Request, rt *route, tg *target, ep *endpoint.Endpoint) {
	l.listener, l.remote, l.method, l.host = h.name, r.RemoteAddr, r.Method, r.Host
	l.path, l.query, l.proto = r.URL.Path, r.URL.RawQuery, r.Proto
	if v := r.Header["User-Agent"]; len(v) > 0 {
		l.userAgent = v[0]
	}
	if rt != nil {
		l.route = rt.name
	}
	if tg != nil && tg.pipe != nil { // nil: the route redirects
		l.upstream = tg.pipe.Upstream().Name()
	}
	if ep != nil {
		l.endpoint = ep.Address()
	}
}

// own copies the strings l borrows from its request, in one allocation:
// an event loop's connection parses its next request into the same
// memory (h1.Reuse), so a line handled later, on another goroutine, must
// not point into it.
func (l *accessLine) own() {
	fs := [...]*string{&l.method, &l.host, &l.path, &l.query, &l.userAgent, &l.requestID}
	n := 0
	for _, f := range fs {
		n += len(*f)
	}
	if n == 0 {
		return
	}
	b := make([]byte, 0, n) // never grown: the strings below stay put
	for _, f := range fs {
		i := len(b)
		b = append(b, *f...)
		*f = unsafe.String(unsafe.SliceData(b[i:]), len(*f))
	}
}

// fields gives w the attributes of the line, in their order: the one
// definition of the access line's fields, for both engines, whether
// encoded (accessline.go) or handed to the logger's handler.
func (l *accessLine) fields(w *accessFields) {
	w.str("listener", l.listener)
	w.str("remote", l.remote)
	w.str("method", l.method)
	w.str("host", l.host)
	w.str("path", l.path)
	w.str("query", l.query)
	w.str("proto", l.proto)
	w.str("user_agent", l.userAgent)
	w.int("status", int64(l.status))
	w.str("route", l.route)
	w.str("upstream", l.upstream)
	w.str("endpoint", l.endpoint)
	w.int("attempts", int64(l.attempts))
	w.seconds("duration_seconds", l.took)
	w.seconds("upstream_ttfb_seconds", l.ttfb)
	w.int("bytes_in", l.in)
	w.int("bytes_out", l.out)
	w.str("request_id", l.requestID)
	w.str("degraded", l.degraded)
	if l.traceID != "" {
		w.str("trace_id", l.traceID)
	}
}

// attrs returns the attributes of the line, for the logger's handler,
// held in w (a zero accessFields).
func (l *accessLine) attrs(w *accessFields) []slog.Attr {
	l.fields(w)
	return w.attrs[:w.n]
}

// countingReader counts the bytes read through it: the request body as
// it goes upstream. Atomic: the upstream client may still be sending it
// when the access log reads the count.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingWriter counts the response body bytes written through it. It
// passes Flush on and unwraps for http.ResponseController (Hijack, for a
// protocol switch).
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
