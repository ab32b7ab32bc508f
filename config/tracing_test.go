package config

import "testing"

// TestTracingProblemsAreFieldErrors: every problem of a tracing block is
// reported at FILE:LINE:COL of the value (or key) at fault, all in one
// run.
func TestTracingProblemsAreFieldErrors(t *testing.T) {
	const base = "listeners:\n  - name: web\n    listen: :8080\n    routes: [{upstream: u}]\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"endpoint missing", base + "tracing:\n  insecure: true\n",
			[]string{`8:3: tracing.endpoint is required: the OTLP receiver's host:port`}},
		{"every value wrong", base + "tracing:\n  endpoint: 'otel:99999'\n  protocol: udp\n  sample_ratio: 1.5\n  service_name: ''\n  headers: {'bad name': x}\n  resource_attributes: {'': x}\n",
			[]string{
				`8:13: tracing.endpoint "otel:99999" has port 99999, above 65535`,
				`9:13: tracing.protocol "udp" is not known (known: http, grpc)`,
				`10:17: tracing.sample_ratio 1.5 is outside 0-1`,
				`11:17: tracing.service_name must not be empty`,
				`12:13: tracing.headers: "bad name" is not a valid header name`,
				`13:25: tracing.resource_attributes: a name must not be empty`,
			}},
		{"a URL for grpc", base + "tracing: {endpoint: 'http://otel:4317', protocol: grpc}\n",
			[]string{`7:21: tracing.endpoint "http://otel:4317": protocol grpc takes host:port, not a URL`}},
		{"a URL that is not http", base + "tracing: {endpoint: 'ftp://otel/v1/traces'}\n",
			[]string{`7:21: tracing.endpoint "ftp://otel/v1/traces" is not an http(s) URL with a host`}},
		{"negative ratio", base + "tracing: {endpoint: 'otel:4318', sample_ratio: -0.1}\n",
			[]string{`7:48: tracing.sample_ratio -0.1 is outside 0-1`}},
		{"unknown key", base + "tracing: {endpoint: 'otel:4318', ratio: 0.5}\n",
			[]string{`7:34: unknown key "ratio" in tracing (known: endpoint, protocol, sample_ratio, service_name, resource_attributes, headers, insecure, timeout)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = "lb.yaml:" + w
			}
			checkLines(t, problemLines(t, "lb.yaml", tt.src), want)
		})
	}
}

// TestTracingDefaults: a tracing block with only an endpoint gets the
// documented defaults; no block means no tracing.
func TestTracingDefaults(t *testing.T) {
	const base = "listeners:\n  - name: web\n    listen: :8080\n    routes: [{upstream: u}]\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
	cfg, err := Parse("lb.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing != nil {
		t.Fatalf("tracing %+v without a block, want nil (off)", cfg.Tracing)
	}
	cfg, err = Parse("lb.yaml", []byte(base+"tracing: {endpoint: 'otel:4318'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Tracing
	if tr.Protocol != "http" || tr.ServiceName != "switchboard" || tr.Timeout != DefaultTracingTimeout || tr.Ratio() != 1 || tr.Insecure {
		t.Fatalf("defaults %+v ratio %v, want http, switchboard, 10s, 1, TLS", tr, tr.Ratio())
	}
}
