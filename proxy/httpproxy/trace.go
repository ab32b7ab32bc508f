package httpproxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// Tracer makes the proxy's OpenTelemetry spans: a server span per request
// ("GET route", or the method alone when no route matched), as the child
// of the client's W3C traceparent when it sent one, and a client span per
// attempt ("GET upstream"), child of the server span, whose context goes
// upstream as traceparent (and tracestate). Span attributes:
//
//   - server: http.request.method, url.path, server.address, client.address,
//     user_agent.original, switchboard.listener, switchboard.request_id,
//     then http.response.status_code, switchboard.route, switchboard.upstream,
//     switchboard.endpoint, switchboard.attempts and switchboard.degraded
//     (the fallback step and reason, when one answered); the proxy's own
//     error answers and 5xx statuses set the span's status to Error, with the
//     error recorded.
//   - attempt: switchboard.upstream, switchboard.endpoint (server.address and
//     server.port too), switchboard.attempt (1 for the first),
//     switchboard.retry_reason (why the attempt before it failed: connect,
//     reset, timeout, or "status 503"), switchboard.hedge, switchboard.fallback_step
//     ("backup" for a backup fallback step's exchange), and
//     http.response.status_code or the error.
//
// Sampling, export and the resource are the provider's (internal/tracing).
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns a Tracer over t, for Change.Trace.
func NewTracer(t trace.Tracer) *Tracer { return &Tracer{t: t} }

// Trace sets the tracer of every listener of the change (nil: tracing
// off). Call it before Commit; requests that started on the old tables
// keep the old tracer.
func (c *Change) Trace(t *Tracer) {
	for _, p := range c.plans {
		p.table.tracer = t
	}
}

var (
	propagator = propagation.TraceContext{}
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// stateKey carries a traced request's state in its context, for the
// attempts of backup fallback steps, whose calls have no Front.
type stateKey struct{}

// startServer starts the server span of a request and returns the request
// carrying it in its context.
func (tr *Tracer) startServer(st *reqState, r *http.Request, listener string) *http.Request {
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx = context.WithValue(ctx, stateKey{}, st)
	// The sampler (parent-based ratio) does not read attributes: they are
	// only made for a span that is recorded.
	ctx, span := tr.t.Start(ctx, r.Method, serverKind)
	if span.IsRecording() {
		var ua string
		if v := r.Header["User-Agent"]; len(v) > 0 {
			ua = v[0]
		}
		span.SetAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path),
			attribute.String("server.address", r.Host),
			attribute.String("client.address", r.RemoteAddr),
			attribute.String("user_agent.original", ua),
			attribute.String("switchboard.listener", listener),
			attribute.String("switchboard.request_id", st.vals[2]),
		)
	}
	st.obs.tracer, st.obs.span, st.obs.ctx = tr, span, ctx
	return r.WithContext(ctx)
}

// endServer ends the server span of a request.
func (tr *Tracer) endServer(st *reqState, w http.ResponseWriter, r *http.Request, rt *route, tg *target, res result) {
	span := st.obs.span
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.Int("http.response.status_code", res.status))
	if rt != nil {
		span.SetName(r.Method + " " + rt.name)
		attrs = append(attrs,
			attribute.String("switchboard.route", rt.name),
			attribute.Int("switchboard.attempts", int(st.obs.attempts.Load())))
	}
	if tg != nil && tg.pipe != nil { // nil: the route redirects
		attrs = append(attrs, attribute.String("switchboard.upstream", tg.pipe.Upstream().Name()))
	}
	if res.ep != nil {
		attrs = append(attrs, attribute.String("switchboard.endpoint", res.ep.Address()))
	}
	if v := w.Header()[fallback.HeaderDegraded]; len(v) > 0 {
		attrs = append(attrs, attribute.String("switchboard.degraded", v[0]))
	}
	span.SetAttributes(attrs...)
	switch {
	case res.err != nil:
		span.RecordError(res.err)
		code := ""
		if pe, ok := res.err.(*pipeline.Error); ok {
			code = pe.Code
		}
		span.SetStatus(codes.Error, code)
	case res.bodyErr != nil:
		span.RecordError(res.bodyErr)
		span.SetStatus(codes.Error, "upstream response body broke off")
	case res.status >= 500:
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// tracedState returns the state of the traced request whose backup
// fallback step ctx belongs to, or nil.
func tracedState(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// startAttempt starts the client span of an attempt and returns the
// header to send it with: the request's, with the span as traceparent.
func (tr *Tracer) startAttempt(o *observation, r *http.Request, upName string, ep *endpoint.Endpoint, n int32, hedge, backup bool) (http.Header, trace.Span) {
	_, span := tr.t.Start(o.ctx, "attempt", clientKind)
	hdr := r.Header.Clone()
	propagator.Inject(trace.ContextWithSpan(context.Background(), span), propagation.HeaderCarrier(hdr))
	if !span.IsRecording() {
		return hdr, span
	}
	span.SetName(r.Method + " " + upName)
	attrs := make([]attribute.KeyValue, 0, 8)
	addr := ep.Address()
	attrs = append(attrs,
		attribute.String("switchboard.upstream", upName),
		attribute.String("switchboard.endpoint", addr))
	if host, port, ok := splitHostPort(addr); ok {
		attrs = append(attrs, attribute.String("server.address", host), attribute.Int("server.port", port))
	}
	switch {
	case backup:
		attrs = append(attrs, attribute.String("switchboard.fallback_step", "backup"))
	default:
		attrs = append(attrs, attribute.Int("switchboard.attempt", int(n)), attribute.Bool("switchboard.hedge", hedge))
		if n > 1 && !hedge {
			attrs = append(attrs, attribute.String("switchboard.retry_reason", retryReason(o.outcome.Load())))
		}
	}
	span.SetAttributes(attrs...)
	return hdr, span
}

// endAttempt records how an attempt ended. A response's span ends when
// its body is closed (a protocol switch's at once: its body is the
// tunnel's connection).
func endAttempt(span trace.Span, resp *http.Response, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, "")
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil {
		span.End()
		return
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: span}
}

// spanBody ends an attempt's span when its response body is closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.span.End() })
	return err
}

func retryReason(outcome uint32) string {
	switch {
	case outcome >= outcomeStatus:
		return "status " + strconv.Itoa(int(outcome-outcomeStatus))
	case outcome == outcomeConnect:
		return "connect"
	case outcome == outcomeTimeout:
		return "timeout"
	case outcome == outcomeReset:
		return "reset"
	}
	return ""
}

// splitHostPort splits an endpoint's address.
func splitHostPort(addr string) (string, int, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			p, err := strconv.Atoi(addr[i+1:])
			host := addr[:i]
			if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
				host = host[1 : len(host)-1]
			}
			return host, p, err == nil
		}
	}
	return "", 0, false
}
