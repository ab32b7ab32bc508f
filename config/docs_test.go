package config

import (
	"os"
	"regexp"
	"testing"
)

// TestDocsExamplesAreValid keeps the YAML examples in
// docs/configuration.md loadable.
func TestDocsExamplesAreValid(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d yaml blocks in docs/configuration.md, want the complete example and the others", len(blocks))
	}
	env := map[string]string{"PORT": "8080", "ORDERS_HOST": "orders.internal"}
	h := sys{
		lookupEnv: func(name string) (string, bool) { v, ok := env[name]; return v, ok },
		readFile:  readSmallFile,
	}
	for i, b := range blocks {
		if _, err := parse("configuration.md", b[1], h); err != nil {
			t.Errorf("yaml block %d does not load:\n%v\n---\n%s", i, err, b[1])
		}
	}
}
