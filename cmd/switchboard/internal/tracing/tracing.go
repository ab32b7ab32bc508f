// Package tracing builds the OpenTelemetry tracer provider of a
// configuration's tracing block: an OTLP exporter (HTTP or gRPC), a batch
// span processor, a parent-based ratio sampler and the service's
// resource. The proxy's spans are made in proxy/httpproxy over the
// provider's Tracer; this package only builds, flushes and stops it.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/config"
)

// InstrumentationName names the tracer the proxy's spans come from.
const InstrumentationName = "github.com/switchboard-dev/switchboard/proxy/httpproxy"

// Provider is one running tracing setup: its spans are batched and sent
// to the configured OTLP receiver until Shutdown.
type Provider struct {
	cfg config.Tracing
	tp  *sdktrace.TracerProvider
}

// New builds the provider of cfg, which must have passed validation (and
// had its defaults applied). Nothing is dialled until the first export.
func New(cfg *config.Tracing, log *slog.Logger) (*Provider, error) {
	exp, err := exporter(cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	for _, k := range slices.Sorted(maps.Keys(cfg.ResourceAttributes)) {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, cfg.ResourceAttributes[k]))
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	setErrorLog(log)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithExportTimeout(cfg.Timeout.Std())),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Ratio()))),
		sdktrace.WithResource(res),
	)
	p := &Provider{cfg: *cfg, tp: tp}
	p.cfg.Headers = maps.Clone(cfg.Headers)
	p.cfg.ResourceAttributes = maps.Clone(cfg.ResourceAttributes)
	return p, nil
}

// exporter returns the OTLP exporter cfg asks for.
func exporter(cfg *config.Tracing) (sdktrace.SpanExporter, error) {
	ctx := context.Background()
	if cfg.Protocol == "grpc" {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithTimeout(cfg.Timeout.Std())}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(maps.Clone(cfg.Headers)))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithTimeout(cfg.Timeout.Std())}
	if strings.Contains(cfg.Endpoint, "://") {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		if u.Scheme == "http" || cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(maps.Clone(cfg.Headers)))
	}
	return otlptracehttp.New(ctx, opts...)
}

// Tracer returns the tracer the proxy makes its spans with.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer(InstrumentationName) }

// Same reports whether p runs exactly the settings of cfg, so that a
// reload that leaves them alone keeps p (and its batch of spans). Every
// key of config.Tracing is compared (TestSameComparesEverySetting counts
// them).
func (p *Provider) Same(cfg *config.Tracing) bool {
	if p == nil || cfg == nil {
		return p == nil && cfg == nil
	}
	a := &p.cfg
	return a.Endpoint == cfg.Endpoint && a.Protocol == cfg.Protocol && a.Ratio() == cfg.Ratio() &&
		a.ServiceName == cfg.ServiceName && a.Insecure == cfg.Insecure && a.Timeout == cfg.Timeout &&
		maps.Equal(a.Headers, cfg.Headers) && maps.Equal(a.ResourceAttributes, cfg.ResourceAttributes)
}

// ForceFlush sends the spans ended so far.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Shutdown sends the spans ended so far and stops the provider: spans
// ended later are dropped. ctx bounds the wait.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

var errorLog struct {
	once sync.Once
	mu   sync.Mutex
	log  *slog.Logger
}

// setErrorLog sends the OpenTelemetry SDK's errors (an export that
// failed) to log instead of the standard logger: the handler is global to
// the process, so the last provider's log wins.
func setErrorLog(log *slog.Logger) {
	errorLog.mu.Lock()
	errorLog.log = log
	errorLog.mu.Unlock()
	errorLog.once.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			errorLog.mu.Lock()
			l := errorLog.log
			errorLog.mu.Unlock()
			l.Warn("tracing: export failed", "error", err)
		}))
	})
}
