package plane_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver collects the spans exported to it, over OTLP/HTTP or
// OTLP/gRPC, as a collector would.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string
	// count only: a benchmark's spans are not kept
	countOnly bool
	count     atomic.Int64

	mu      sync.Mutex
	spans   []gotSpan
	headers []http.Header // of each export
}

// gotSpan is one received span with its resource's attributes.
type gotSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest, h http.Header) {
	if r.countOnly {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.count.Add(int64(len(ss.Spans)))
			}
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, h)
	for _, rs := range req.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, gotSpan{sp, res})
			}
		}
	}
}

func (r *otlpReceiver) received() ([]gotSpan, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...), append([]http.Header(nil), r.headers...)
}

// Export implements the OTLP/gRPC trace service.
func (r *otlpReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header{}
	for k, vv := range md {
		for _, v := range vv {
			h.Add(k, v)
		}
	}
	r.add(req, h)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startOTLPHTTP runs an OTLP/HTTP receiver: POST /v1/traces with a
// protobuf ExportTraceServiceRequest.
func startOTLPHTTP(t testing.TB) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var ex coltracepb.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &ex) != nil {
			t.Errorf("OTLP/HTTP receiver: bad export %s %s (%s): %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.add(&ex, req.Header.Clone())
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.addr = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// startOTLPGRPC runs an OTLP/gRPC receiver.
func startOTLPGRPC(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, r)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	r.addr = ln.Addr().String()
	return r
}

func attr(kvs []*commonpb.KeyValue, key string) any {
	for _, kv := range kvs {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return v.IntValue
			case *commonpb.AnyValue_BoolValue:
				return v.BoolValue
			}
		}
	}
	return nil
}

func spanNamed(t *testing.T, spans []gotSpan, kind tracepb.Span_SpanKind, check func(gotSpan) bool) gotSpan {
	t.Helper()
	for _, s := range spans {
		if s.Kind == kind && check(s) {
			return s
		}
	}
	t.Fatalf("no %v span as wanted among %d spans: %v", kind, len(spans), spans)
	return gotSpan{}
}

// traceparentRecorder is an endpoint that records the traceparent and
// tracestate of every request; fail decides, per request (1 for the
// first), whether to break the exchange (close the connection unanswered).
type traceparentRecorder struct {
	mu     sync.Mutex
	parent []string
	state  []string
}

func (rec *traceparentRecorder) backend(t *testing.T, fail func(n int) bool) *backend {
	return newBackend(t, "traced", func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.parent = append(rec.parent, r.Header.Get("Traceparent"))
		rec.state = append(rec.state, r.Header.Get("Tracestate"))
		n := len(rec.parent)
		rec.mu.Unlock()
		if fail != nil && fail(n) {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
			return
		}
		w.Write([]byte("traced"))
	})
}

func (rec *traceparentRecorder) got() ([]string, []string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.parent...), append([]string(nil), rec.state...)
}

func tracingYAML(route, target, tracing string) string {
	return strings.Replace(loggedYAML(route, target), "upstreams:\n", "tracing:\n"+tracing+"upstreams:\n", 1)
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// TestTracingOverOTLPHTTPForARetriedRequest: a request that carries a
// client's traceparent and is retried once after its first exchange
// broke is exported over OTLP/HTTP as one server span, child of the
// client's span in the client's trace, and two attempt spans under it:
// the first with its error, the second with the retry's reason and the
// answer's status. Each exchange reached the endpoint with a traceparent
// whose parent is its own attempt span, and the client's tracestate. The
// access log line names the trace.
func TestTracingOverOTLPHTTPForARetriedRequest(t *testing.T) {
	recv := startOTLPHTTP(t)
	var rec traceparentRecorder
	b := rec.backend(t, func(n int) bool { return n == 1 })
	p, sink, stop := startStoppableProxy(t, tracingYAML(`        retry: {attempts: 2, retry_on: [reset], backoff_base: 1ms, backoff_max: 2ms}`, b.addr(),
		"  endpoint: "+recv.addr+"\n  insecure: true\n  service_name: switchboard-test\n  resource_attributes: {deployment.environment: test}\n  headers: {X-Api-Key: secret}\n"))
	resp, body := doGet(t, p.url("web")+"/orders", map[string]string{
		"Traceparent": "00-" + clientTraceID + "-" + clientSpanID + "-01",
		"Tracestate":  "vendor=1",
	})
	if resp.StatusCode != 200 || body != "traced" {
		t.Fatalf("answer %d %q, want 200 traced after one retry", resp.StatusCode, body)
	}
	if m := sink.next(t); m["trace_id"] != clientTraceID || m["attempts"] != 2.0 {
		t.Fatalf("access log trace_id %v attempts %v, want %s, 2", m["trace_id"], m["attempts"], clientTraceID)
	}
	stop() // flushes the spans

	spans, headers := recv.received()
	if len(spans) != 3 {
		t.Fatalf("received %d spans, want 3 (server, two attempts): %v", len(spans), spans)
	}
	for _, h := range headers {
		if h.Get("X-Api-Key") != "secret" {
			t.Fatalf("export without the configured header: %v", h)
		}
	}
	srv := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(gotSpan) bool { return true })
	if srv.Name != "GET api" || hex.EncodeToString(srv.TraceId) != clientTraceID || hex.EncodeToString(srv.ParentSpanId) != clientSpanID {
		t.Fatalf("server span %q trace %x parent %x, want \"GET api\" in the client's trace %s under its span %s",
			srv.Name, srv.TraceId, srv.ParentSpanId, clientTraceID, clientSpanID)
	}
	for k, v := range map[string]any{"switchboard.route": "api", "switchboard.upstream": "app", "switchboard.endpoint": b.addr(),
		"switchboard.attempts": int64(2), "http.response.status_code": int64(200), "http.request.method": "GET", "url.path": "/orders"} {
		if got := attr(srv.Attributes, k); got != v {
			t.Errorf("server span %s = %#v, want %#v", k, got, v)
		}
	}
	if srv.resource["service.name"] != "switchboard-test" || srv.resource["deployment.environment"] != "test" {
		t.Errorf("resource %v, want service.name switchboard-test and deployment.environment test", srv.resource)
	}
	first := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(s gotSpan) bool { return attr(s.Attributes, "switchboard.attempt") == int64(1) })
	second := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(s gotSpan) bool { return attr(s.Attributes, "switchboard.attempt") == int64(2) })
	for _, s := range []gotSpan{first, second} {
		if s.Name != "GET app" || string(s.TraceId) != string(srv.TraceId) || string(s.ParentSpanId) != string(srv.SpanId) {
			t.Fatalf("attempt span %q trace %x parent %x, want \"GET app\" under the server span %x", s.Name, s.TraceId, s.ParentSpanId, srv.SpanId)
		}
		if attr(s.Attributes, "switchboard.endpoint") != b.addr() || attr(s.Attributes, "switchboard.upstream") != "app" || attr(s.Attributes, "switchboard.hedge") != false {
			t.Errorf("attempt span attributes %v", s.Attributes)
		}
	}
	if first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || len(first.Events) == 0 || first.Events[0].Name != "exception" {
		t.Errorf("first attempt: status %v events %v, want an error with the exception recorded", first.Status, first.Events)
	}
	if attr(second.Attributes, "switchboard.retry_reason") != "reset" || attr(second.Attributes, "http.response.status_code") != int64(200) ||
		second.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("second attempt: retry_reason %v status %v (%v), want reset, 200, no error",
			attr(second.Attributes, "switchboard.retry_reason"), attr(second.Attributes, "http.response.status_code"), second.Status)
	}

	parents, states := rec.got()
	want := []string{
		fmt.Sprintf("00-%x-%x-01", first.TraceId, first.SpanId),
		fmt.Sprintf("00-%x-%x-01", second.TraceId, second.SpanId),
	}
	if len(parents) != 2 || parents[0] != want[0] || parents[1] != want[1] {
		t.Fatalf("the endpoint got traceparents %q, want each attempt's own %q", parents, want)
	}
	if states[0] != "vendor=1" || states[1] != "vendor=1" {
		t.Fatalf("the endpoint got tracestates %q, want the client's vendor=1", states)
	}
}

// TestTracingOverOTLPGRPC: with protocol grpc a request without a
// traceparent starts a trace of its own, exported to an OTLP/gRPC
// receiver with the configured headers as metadata; the endpoint's
// traceparent names the attempt span.
func TestTracingOverOTLPGRPC(t *testing.T) {
	recv := startOTLPGRPC(t)
	var rec traceparentRecorder
	b := rec.backend(t, nil)
	p, _, stop := startStoppableProxy(t, tracingYAML("", b.addr(),
		"  endpoint: "+recv.addr+"\n  protocol: grpc\n  insecure: true\n  headers: {authorization: Bearer t0ken}\n"))
	if resp, _ := doGet(t, p.url("web")+"/x", nil); resp.StatusCode != 200 {
		t.Fatalf("answer %d", resp.StatusCode)
	}
	stop()
	spans, headers := recv.received()
	if len(spans) != 2 {
		t.Fatalf("received %d spans, want 2: %v", len(spans), spans)
	}
	if len(headers) == 0 || headers[0].Get("Authorization") != "Bearer t0ken" {
		t.Fatalf("export metadata %v, want authorization: Bearer t0ken", headers)
	}
	srv := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(gotSpan) bool { return true })
	att := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(gotSpan) bool { return true })
	if len(srv.ParentSpanId) != 0 || string(att.ParentSpanId) != string(srv.SpanId) || srv.resource["service.name"] != "switchboard" {
		t.Fatalf("server span parent %x (want none), attempt parent %x (want %x), service %q (want switchboard)",
			srv.ParentSpanId, att.ParentSpanId, srv.SpanId, srv.resource["service.name"])
	}
	parents, _ := rec.got()
	if want := fmt.Sprintf("00-%x-%x-01", att.TraceId, att.SpanId); len(parents) != 1 || parents[0] != want {
		t.Fatalf("the endpoint got traceparent %q, want %q", parents, want)
	}
}

// TestTracingSampleRatioZeroSendsNothing: with sample_ratio 0 new traces
// are not recorded, and the endpoint learns so from the traceparent's
// flags; a request whose client sampled its trace is still recorded
// (parent-based sampling), which also shows that the receiver works.
func TestTracingSampleRatioZeroSendsNothing(t *testing.T) {
	recv := startOTLPHTTP(t)
	var rec traceparentRecorder
	b := rec.backend(t, nil)
	p, _, stop := startStoppableProxy(t, tracingYAML("", b.addr(), "  endpoint: "+recv.addr+"\n  insecure: true\n  sample_ratio: 0\n"))
	for i := 0; i < 20; i++ {
		if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("answer %d", resp.StatusCode)
		}
	}
	if resp, _ := doGet(t, p.url("web")+"/", map[string]string{"Traceparent": "00-" + clientTraceID + "-" + clientSpanID + "-01"}); resp.StatusCode != 200 {
		t.Fatalf("answer %d", resp.StatusCode)
	}
	stop()
	spans, _ := recv.received()
	if len(spans) != 2 {
		t.Fatalf("received %d spans, want only the 2 of the client-sampled request", len(spans))
	}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != clientTraceID {
			t.Fatalf("a span of trace %x was sent; only the client's sampled trace %s may be", s.TraceId, clientTraceID)
		}
	}
	parents, _ := rec.got()
	for i, tp := range parents[:20] {
		if len(tp) != 55 || !strings.HasSuffix(tp, "-00") {
			t.Fatalf("request %d reached the endpoint with traceparent %q, want one flagged not sampled (-00)", i, tp)
		}
	}
}

// TestTracingReloadSwapsTheProvider: a reload that changes the tracing
// settings sends later spans to the new receiver, after the old provider
// sent what it had; a reload that removes tracing stops it, and requests
// then reach the endpoint with the client's traceparent untouched.
func TestTracingReloadSwapsTheProvider(t *testing.T) {
	oldRecv, newRecv := startOTLPHTTP(t), startOTLPGRPC(t)
	var rec traceparentRecorder
	b := rec.backend(t, nil)
	p, _, stop := startStoppableProxy(t, tracingYAML("", b.addr(), "  endpoint: "+oldRecv.addr+"\n  insecure: true\n"))
	get := func(tp string) {
		t.Helper()
		h := map[string]string{}
		if tp != "" {
			h["Traceparent"] = tp
		}
		if resp, _ := doGet(t, p.url("web")+"/", h); resp.StatusCode != 200 {
			t.Fatalf("answer %d", resp.StatusCode)
		}
	}
	get("")
	if err := p.srv.Apply(loadYAML(t, tracingYAML("", b.addr(), "  endpoint: "+newRecv.addr+"\n  protocol: grpc\n  insecure: true\n"))); err != nil {
		t.Fatal(err)
	}
	get("")
	client := "00-" + clientTraceID + "-" + clientSpanID + "-01"
	if err := p.srv.Apply(loadYAML(t, loggedYAML("", b.addr()))); err != nil {
		t.Fatal(err)
	}
	get(client)
	stop()
	oldSpans, _ := oldRecv.received()
	newSpans, _ := newRecv.received()
	if len(oldSpans) != 2 || len(newSpans) != 2 || string(oldSpans[0].TraceId) == string(newSpans[0].TraceId) {
		t.Fatalf("old receiver got %d spans, new one %d; want 2 each, of different traces", len(oldSpans), len(newSpans))
	}
	if parents, _ := rec.got(); parents[2] != client {
		t.Fatalf("with tracing off the endpoint got traceparent %q, want the client's %q", parents[2], client)
	}
}

// BenchmarkProxyHTTP1Observed is BenchmarkProxyHTTP1 with the access log
// and tracing off (the peer), with the access log on (JSON, discarded),
// and with tracing on at sample ratio 0 and 1 (spans exported over
// OTLP/HTTP to a receiver in the process that decodes and counts them).
func BenchmarkProxyHTTP1Observed(b *testing.B) {
	be := rawBackend(b)
	recv := startOTLPHTTP(b)
	recv.countOnly = true
	base := upstreamYAML("", be)
	cases := []struct{ name, yaml string }{
		{"off", base},
		{"access_log", strings.Replace(base, "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    access_log: true\n", 1)},
		{"tracing_ratio_0", strings.Replace(base, "upstreams:\n", "tracing: {endpoint: "+recv.addr+", insecure: true, sample_ratio: 0}\nupstreams:\n", 1)},
		{"tracing_ratio_1", strings.Replace(base, "upstreams:\n", "tracing: {endpoint: "+recv.addr+", insecure: true, sample_ratio: 1}\nupstreams:\n", 1)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			p := startProxy(b, tc.yaml)
			benchGets(b, func() (net.Conn, error) { return net.Dial("tcp", p.srv.Addr("web")) })
		})
	}
}

// TestTracingMarksAHedge: when the first attempt is slow and a hedge is
// sent to the other endpoint, the hedge's span says so (switchboard.hedge,
// its own attempt number, no retry reason) and the server span names the
// hedge's endpoint as the one that answered.
func TestTracingMarksAHedge(t *testing.T) {
	recv := startOTLPHTTP(t)
	var calls atomic.Int64
	h := func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-r.Context().Done() // the slow first attempt, until the hedge wins and it is cancelled
			return
		}
		w.Write([]byte("fast"))
	}
	a, b := newBackend(t, "a", h), newBackend(t, "b", h)
	p, _, stop := startStoppableProxy(t, tracingYAML(`        retry: {attempts: 2, hedge_after: 20ms}`, a.addr()+"}, {address: "+b.addr(),
		"  endpoint: "+recv.addr+"\n  insecure: true\n"))
	if resp, body := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 200 || body != "fast" {
		t.Fatalf("answer %d %q, want the hedge's 200 fast", resp.StatusCode, body)
	}
	stop()
	spans, _ := recv.received()
	hedge := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(s gotSpan) bool { return attr(s.Attributes, "switchboard.hedge") == true })
	srv := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(gotSpan) bool { return true })
	if attr(hedge.Attributes, "switchboard.attempt") != int64(2) || attr(hedge.Attributes, "switchboard.retry_reason") != nil ||
		attr(hedge.Attributes, "http.response.status_code") != int64(200) {
		t.Fatalf("hedge span attributes %v, want attempt 2, no retry reason, status 200", hedge.Attributes)
	}
	if attr(srv.Attributes, "switchboard.endpoint") != attr(hedge.Attributes, "switchboard.endpoint") || attr(srv.Attributes, "switchboard.attempts") != int64(2) {
		t.Fatalf("server span endpoint %v attempts %v, want the hedge's endpoint %v and 2",
			attr(srv.Attributes, "switchboard.endpoint"), attr(srv.Attributes, "switchboard.attempts"), attr(hedge.Attributes, "switchboard.endpoint"))
	}
}

// TestTracingFollowsABackupStep: when every attempt failed and a backup
// fallback step answers from another upstream, its exchange has a span of
// its own (switchboard.fallback_step backup, the backup's upstream), the
// backup endpoint's traceparent names that span, and the server span says
// the answer was degraded.
func TestTracingFollowsABackupStep(t *testing.T) {
	recv := startOTLPHTTP(t)
	var rec traceparentRecorder
	dr := rec.backend(t, nil)
	yaml := tracingYAML(`        fallback:
          on: [retries_exhausted]
          steps: [{type: backup, upstream: dr}]`, deadAddr(t), "  endpoint: "+recv.addr+"\n  insecure: true\n")
	yaml += "  dr:\n    targets: [{address: " + dr.addr() + "}]\n"
	p, sink, stop := startStoppableProxy(t, yaml)
	resp, body := doGet(t, p.url("web")+"/", nil)
	if resp.StatusCode != 200 || body != "traced" || !strings.HasPrefix(resp.Header.Get("X-Switchboard-Degraded"), "backup: ") {
		t.Fatalf("answer %d %q degraded %q, want the backup's", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
	if m := sink.next(t); m["degraded"] != resp.Header.Get("X-Switchboard-Degraded") || m["attempts"] != 1.0 {
		t.Fatalf("access log degraded %v attempts %v, want %q and 1 (the backup's exchange is not an attempt)", m["degraded"], m["attempts"], resp.Header.Get("X-Switchboard-Degraded"))
	}
	stop()
	spans, _ := recv.received()
	if len(spans) != 3 {
		t.Fatalf("received %d spans, want 3 (server, the failed attempt, the backup's exchange)", len(spans))
	}
	srv := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(gotSpan) bool { return true })
	backup := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(s gotSpan) bool { return attr(s.Attributes, "switchboard.fallback_step") == "backup" })
	failed := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(s gotSpan) bool { return attr(s.Attributes, "switchboard.attempt") == int64(1) })
	if backup.Name != "GET dr" || attr(backup.Attributes, "switchboard.upstream") != "dr" || string(backup.ParentSpanId) != string(srv.SpanId) {
		t.Fatalf("backup span %q upstream %v parent %x, want \"GET dr\", dr, under the server span %x", backup.Name, attr(backup.Attributes, "switchboard.upstream"), backup.ParentSpanId, srv.SpanId)
	}
	if failed.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("the failed attempt's span status %v, want an error", failed.Status)
	}
	if d, _ := attr(srv.Attributes, "switchboard.degraded").(string); !strings.HasPrefix(d, "backup: ") {
		t.Fatalf("server span switchboard.degraded %q, want the backup step", d)
	}
	if parents, _ := rec.got(); len(parents) != 1 || parents[0] != fmt.Sprintf("00-%x-%x-01", backup.TraceId, backup.SpanId) {
		t.Fatalf("the backup endpoint got traceparent %q, want the backup span's", parents)
	}
}

// TestTracingOverAnH2CUpstream: an h2c upstream's exchanges carry their
// attempt span's traceparent too (they go through net/http, with a copy of
// the request).
func TestTracingOverAnH2CUpstream(t *testing.T) {
	recv := startOTLPHTTP(t)
	var rec traceparentRecorder
	b := newBackendWith(t, "h2c", func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.parent = append(rec.parent, r.Proto+" "+r.Header.Get("Traceparent"))
		rec.mu.Unlock()
		w.Write([]byte("ok"))
	}, func(s *http.Server) {
		var pr http.Protocols
		pr.SetUnencryptedHTTP2(true)
		s.Protocols = &pr
	})
	yaml := strings.Replace(tracingYAML("", b.addr(), "  endpoint: "+recv.addr+"\n  insecure: true\n"), "  app:\n", "  app:\n    protocol: h2c\n", 1)
	p, _, stop := startStoppableProxy(t, yaml)
	if resp, _ := doGet(t, p.url("web")+"/", map[string]string{"Traceparent": "00-" + clientTraceID + "-" + clientSpanID + "-01"}); resp.StatusCode != 200 {
		t.Fatalf("answer %d", resp.StatusCode)
	}
	stop()
	spans, _ := recv.received()
	att := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(gotSpan) bool { return true })
	if parents, _ := rec.got(); len(parents) != 1 || parents[0] != fmt.Sprintf("HTTP/2.0 00-%x-%x-01", att.TraceId, att.SpanId) {
		t.Fatalf("the h2c endpoint got %q, want HTTP/2.0 with the attempt span's traceparent", parents)
	}
}

// TestTracingRecordsTheProxysOwnErrors: a 502 the proxy answers after a
// failed connect has its error recorded on the server span (status Error
// with the error code, an exception event) and on the attempt's; a 404
// no_route has a server span named by the method alone, with its status
// and no error.
func TestTracingRecordsTheProxysOwnErrors(t *testing.T) {
	recv := startOTLPHTTP(t)
	p, _, stop := startStoppableProxy(t, tracingYAML("", deadAddr(t), "  endpoint: "+recv.addr+"\n  insecure: true\n"))
	if resp, _ := doGet(t, p.url("web")+"/", nil); resp.StatusCode != 502 {
		t.Fatalf("answer %d, want 502", resp.StatusCode)
	}
	p2, _, stop2 := startStoppableProxy(t, strings.Replace(tracingYAML("", deadAddr(t), "  endpoint: "+recv.addr+"\n  insecure: true\n"),
		"match: {path_prefix: /}", "match: {path_prefix: /only}", 1))
	if resp, _ := doGet(t, p2.url("web")+"/elsewhere", nil); resp.StatusCode != 404 {
		t.Fatalf("answer %d, want 404", resp.StatusCode)
	}
	stop()
	stop2()
	spans, _ := recv.received()
	failed := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(s gotSpan) bool { return s.Name == "GET api" })
	if failed.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || failed.Status.GetMessage() != "upstream_connect_failed" ||
		len(failed.Events) != 1 || failed.Events[0].Name != "exception" || attr(failed.Attributes, "http.response.status_code") != int64(502) {
		t.Fatalf("server span of the 502: status %v events %v attributes %v; want Error upstream_connect_failed with its exception", failed.Status, failed.Events, failed.Attributes)
	}
	att := spanNamed(t, spans, tracepb.Span_SPAN_KIND_CLIENT, func(gotSpan) bool { return true })
	if att.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || len(att.Events) == 0 {
		t.Fatalf("attempt span of the failed connect: status %v events %v, want the error", att.Status, att.Events)
	}
	noRoute := spanNamed(t, spans, tracepb.Span_SPAN_KIND_SERVER, func(s gotSpan) bool { return s.Name == "GET" })
	if noRoute.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR || attr(noRoute.Attributes, "http.response.status_code") != int64(404) ||
		attr(noRoute.Attributes, "switchboard.route") != nil {
		t.Fatalf("server span of the 404: status %v attributes %v; want 404, no route, no error", noRoute.Status, noRoute.Attributes)
	}
}
