package tracing

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/switchboard-dev/switchboard/config"
)

// TestSameComparesEverySetting: a provider is kept across a reload only
// when every tracing key is unchanged, maps and the ratio's default
// included; nil (off) is the same only as nil.
func TestSameComparesEverySetting(t *testing.T) {
	half, one := 0.5, 1.0
	base := config.Tracing{Endpoint: "127.0.0.1:4318", Protocol: "http", ServiceName: "sb", Timeout: config.Duration(1e9),
		Headers: map[string]string{"a": "1"}, ResourceAttributes: map[string]string{"env": "t"}}
	p, err := New(&base, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	same := base
	same.SampleRatio = &one // the default, written out
	if !p.Same(&same) {
		t.Fatal("an identical block (ratio 1 written out) is not the same")
	}
	changes := map[string]func(c *config.Tracing){
		"endpoint":            func(c *config.Tracing) { c.Endpoint = "127.0.0.1:4317" },
		"protocol":            func(c *config.Tracing) { c.Protocol = "grpc" },
		"sample_ratio":        func(c *config.Tracing) { c.SampleRatio = &half },
		"service_name":        func(c *config.Tracing) { c.ServiceName = "other" },
		"insecure":            func(c *config.Tracing) { c.Insecure = true },
		"timeout":             func(c *config.Tracing) { c.Timeout = 2e9 },
		"headers":             func(c *config.Tracing) { c.Headers = map[string]string{"a": "2"} },
		"resource_attributes": func(c *config.Tracing) { c.ResourceAttributes = nil },
	}
	if n := reflect.TypeFor[config.Tracing]().NumField(); n != len(changes) {
		t.Fatalf("config.Tracing has %d fields and the test changes %d: compare the new one in Same and change it here", n, len(changes))
	}
	for key, change := range changes {
		c := base
		change(&c)
		if p.Same(&c) {
			t.Errorf("a change of %s is taken as the same settings", key)
		}
	}
	if p.Same(nil) {
		t.Error("tracing off is taken as the same as on")
	}
	var none *Provider
	if !none.Same(nil) || none.Same(&base) {
		t.Error("no provider must be the same as tracing off, and only that")
	}
}
