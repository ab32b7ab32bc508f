package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/registry/static"
)

// yamlBlock finds the YAML examples of a Markdown file: ```yaml, then an
// optional word saying where a fragment belongs (see docsFragments).
var yamlBlock = regexp.MustCompile("(?s)```yaml( [a-z-]+)?\n(.*?)```")

// docsFragments place the examples that are not a whole configuration
// file: ```yaml route is the keys of a route, ```yaml upstream those of an
// upstream, ```yaml static-registry a file of registry/static, and
// ```yaml client a client configuration (ParseClient).
var docsFragments = map[string]func(block string) string{
	"route": func(b string) string {
		return "listeners:\n  - name: web\n    listen: 127.0.0.1:8080\n    routes:\n      - upstream: u\n" +
			indent(b, 8) + "upstreams:\n  u: {targets: [{address: 127.0.0.1:9001}]}\n  orders-dr: {targets: [{address: 127.0.0.1:9002}]}\n"
	},
	"upstream": func(b string) string {
		return "listeners:\n  - name: web\n    listen: 127.0.0.1:8080\n    routes: [{upstream: u}]\nupstreams:\n  u:\n    targets: [{address: 127.0.0.1:9001}]\n" + indent(b, 4)
	},
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString(pad)
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestDocsExamplesAreValid keeps every YAML example of the README and
// docs/ loadable: a whole configuration as it is, a fragment in its place.
func TestDocsExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	env := map[string]string{"PORT": "8080", "ORDERS_HOST": "orders.internal", "CONSUL_TOKEN": "s3cret"}
	// The files the examples name on other machines are there for them.
	// They hold real certificates, since they are checked as PEM.
	docPEMs := upstreamTLSDocFiles(t)
	h := sys{
		lookupEnv: func(name string) (string, bool) { v, ok := env[name]; return v, ok },
		readFile: func(path string) ([]byte, error) {
			if from, ok := docPEMs[path]; ok {
				return readSmallFile(from)
			}
			if b, ok := docsTLSFiles(t, path); ok {
				return b, nil
			}
			return readSmallFile(path)
		},
	}
	total := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range yamlBlock.FindAllSubmatch(doc, -1) {
			total++
			where, src := strings.TrimSpace(string(b[1])), string(b[2])
			name := fmt.Sprintf("%s block %d", filepath.Base(f), i)
			switch wrap := docsFragments[where]; {
			case where == "client":
				if _, err := parseClient(name, []byte(src), h); err != nil {
					t.Errorf("%s (a client configuration) does not load:\n%v\n---\n%s", name, err, src)
				}
			case where == "static-registry":
				if _, err := static.Parse(name, []byte(src)); err != nil {
					t.Errorf("%s (a registry/static file) does not load:\n%v\n---\n%s", name, err, src)
				}
			case wrap != nil:
				if _, err := parse(name, []byte(wrap(src)), h); err != nil {
					t.Errorf("%s (the keys of a %s) does not load:\n%v\n---\n%s", name, where, err, wrap(src))
				}
			case where != "":
				t.Errorf("%s is marked %q, which no test knows how to place (known: route, upstream, static-registry, client)", name, where)
			default:
				if _, err := parse(name, []byte(src), h); err != nil {
					t.Errorf("%s does not load:\n%v\n---\n%s", name, err, src)
				}
			}
		}
	}
	if total < 15 {
		t.Fatalf("found %d yaml examples in README.md and docs/, want every one of them (15 or more)", total)
	}
}
