package config

import (
	"slices"
	"testing"
)

func TestCompressGetsItsDefaults(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes:
      - {upstream: u, compress: {}}
      - {upstream: u, compress: {algorithms: [gzip], min_size: 0, level: best, content_types: [text/*]}}
      - {upstream: u, decompress: true}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	rs := cfg.Listeners[0].Routes
	c := rs[0].Compress
	if c == nil || !slices.Equal(c.Algorithms, []string{"zstd", "gzip"}) || c.MinSize == nil || *c.MinSize != KiB ||
		c.Level != "default" || !slices.Equal(c.ContentTypes, DefaultCompressTypes) {
		t.Errorf("compress: {} = %+v, want zstd then gzip, min_size 1KiB, level default, the default types", c)
	}
	c = rs[1].Compress
	if !slices.Equal(c.Algorithms, []string{"gzip"}) || c.MinSize == nil || *c.MinSize != 0 || c.Level != "best" ||
		!slices.Equal(c.ContentTypes, []string{"text/*"}) {
		t.Errorf("compress as written = %+v, want it kept (min_size 0 is not the default)", c)
	}
	if rs[2].Compress != nil || !rs[2].Decompress {
		t.Errorf("decompress alone: compress %+v, decompress %v; want no compression, decompression on", rs[2].Compress, rs[2].Decompress)
	}
}

func TestCompressProblemsPointAtTheValue(t *testing.T) {
	lines := problemLines(t, "lb.yaml", `listeners:
  - name: web
    listen: :8080
    routes:
      - upstream: u
        compress: {algorithms: [gzip, br, gzip], level: max}
      - upstream: u
        compress: {algorithms: [], min_size: 64KiB, content_types: []}
      - upstream: u
        compress:
          content_types: [text/html, "text/html; charset=utf-8", html, "*/json", application/*]
      - upstream: u
        decompress: maybe
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	checkLines(t, lines, []string{
		`lb.yaml:6:39: unknown compression algorithm "br" (known: gzip, zstd)`,
		`lb.yaml:6:43: compress.algorithms lists "gzip" twice (first at line 6)`,
		`lb.yaml:6:57: unknown compress.level "max" (known: fastest, default, best)`,
		`lb.yaml:8:32: compress.algorithms is empty; list gzip, zstd or both (or remove compress)`,
		`lb.yaml:8:46: compress.min_size 64KiB is more than 32KiB, the most of a response of unknown length the proxy holds while it decides`,
		`lb.yaml:8:68: compress.content_types is empty; list the media types to compress (or remove compress)`,
		`lb.yaml:11:38: compress.content_types: "text/html; charset=utf-8" has parameters; list the media type alone ("text/html")`,
		`lb.yaml:11:66: compress.content_types: "html" is not a media type like "text/html" or "text/*"`,
		`lb.yaml:11:72: compress.content_types: "*/json" is not a media type like "text/html" or "text/*"`,
		`lb.yaml:13:21: expected true or false, got "maybe"`,
	})
}

func TestParseClientRefusesCompression(t *testing.T) {
	_, err := ParseClient("client.yaml", []byte(`upstreams:
  orders:
    targets: [{address: "a:1"}]
routes:
  - upstream: orders
    compress: {algorithms: [gzip]}
  - upstream: orders
    decompress: true
`))
	got := problemStrings(err)
	want := []string{
		`client.yaml:6:5: compress and decompress are for the proxy: a program's HTTP client negotiates its own encodings`,
		`client.yaml:8:5: compress and decompress are for the proxy: a program's HTTP client negotiates its own encodings`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
}
