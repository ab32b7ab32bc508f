package fallback

import (
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestConfigDecodesFromYAMLKeys(t *testing.T) {
	const doc = `
on: [breaker_open, "status:503"]
steps:
  - {type: backup, upstream: orders-dr}
  - {type: stale, max_age: 5m}
  - {type: static, status: 503, headers: {Content-Type: text/plain}, body: "later"}
cache: {max_entries: 10, max_bytes: 1000000, max_response_bytes: 1000}
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Steps) != 3 || c.Steps[0].Upstream != "orders-dr" || c.Steps[1].MaxAge != 5*time.Minute ||
		c.Steps[2].Headers["Content-Type"] != "text/plain" || c.Cache.MaxResponseBytes != 1000 {
		t.Fatalf("decoded %+v", c)
	}
}
