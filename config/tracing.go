package config

import (
	"math"
	"net/url"
	"strings"
	"time"
)

// The tracing defaults Parse fills in when a tracing block is present.
const (
	DefaultTracingProtocol    = "http"
	DefaultTracingServiceName = "switchboard"
	DefaultTracingTimeout     = Duration(10 * time.Second)
	DefaultTracingSampleRatio = 1.0
)

// Tracing exports OpenTelemetry traces of the proxied requests over OTLP:
// a server span per request and a client span per attempt, with W3C
// traceparent and tracestate taken from the client's request and passed
// on to every attempt. Without a tracing block nothing is traced and the
// request path does no tracing work. Keys: docs/tracing.md.
type Tracing struct {
	// Endpoint is the OTLP receiver: host:port (4318 is OTLP/HTTP's usual
	// port, 4317 OTLP/gRPC's), or for protocol http also a URL
	// (http://host:port/v1/traces). Required.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http (OTLP/HTTP, protobuf) or grpc. Default http.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the share of new traces recorded, 0 to 1. A request
	// that carries a traceparent follows its caller's decision
	// (parent-based sampling). Default 1.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute. Default
	// switchboard.
	ServiceName string `yaml:"service_name"`
	// ResourceAttributes are more resource attributes (deployment
	// environment, region...), added to every span's resource.
	ResourceAttributes map[string]string `yaml:"resource_attributes"`
	// Headers are sent with every export (an API key, say).
	Headers map[string]string `yaml:"headers"`
	// Insecure sends in plain text; otherwise the exporter uses TLS (an
	// http:// endpoint URL is plain text either way).
	Insecure bool `yaml:"insecure"`
	// Timeout bounds one export. Default 10s.
	Timeout Duration `yaml:"timeout"`
}

// Ratio returns the sample ratio, with its default.
func (t *Tracing) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultTracingSampleRatio
	}
	return *t.SampleRatio
}

func applyTracingDefaults(t *Tracing) {
	if t == nil {
		return
	}
	setDefault(&t.Protocol, DefaultTracingProtocol)
	setDefault(&t.ServiceName, DefaultTracingServiceName)
	setDefault(&t.Timeout, DefaultTracingTimeout)
}

func (v *validator) checkTracing() {
	t := v.cfg.Tracing
	if t == nil {
		return
	}
	switch t.Protocol {
	case "", "http", "grpc":
	default:
		v.errorf(&t.Protocol, "tracing.protocol %q is not known (known: http, grpc)", t.Protocol)
	}
	switch {
	case t.Endpoint == "":
		v.errorf(t, "tracing.endpoint is required: the OTLP receiver's host:port")
	case strings.Contains(t.Endpoint, "://"):
		u, err := url.Parse(t.Endpoint)
		switch {
		case t.Protocol == "grpc":
			v.errorf(&t.Endpoint, "tracing.endpoint %q: protocol grpc takes host:port, not a URL", t.Endpoint)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			v.errorf(&t.Endpoint, "tracing.endpoint %q is not an http(s) URL with a host", t.Endpoint)
		}
	default:
		if _, _, err := splitAddr(t.Endpoint, dialPort); err != nil {
			v.errorf(&t.Endpoint, "tracing.endpoint %q %v", t.Endpoint, err)
		}
	}
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		v.errorf(r, "tracing.sample_ratio %v is outside 0-1", *r)
	}
	if t.ServiceName == "" && v.present(&t.ServiceName) {
		v.errorf(&t.ServiceName, "tracing.service_name must not be empty")
	}
	for _, k := range sortedKeys(t.Headers) {
		switch {
		case !isToken(k):
			v.keyErrorf(entry(t.Headers, k), "tracing.headers: %q is not a valid header name", k)
		case !validHeaderValue(t.Headers[k]):
			v.errorf(entry(t.Headers, k), "tracing.headers.%s: the value has control characters", k)
		}
	}
	for _, k := range sortedKeys(t.ResourceAttributes) {
		if k == "" {
			v.keyErrorf(entry(t.ResourceAttributes, k), "tracing.resource_attributes: a name must not be empty")
		}
	}
}
