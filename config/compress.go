package config

import (
	"fmt"
	"strings"
)

// Compress is a route's response compression: which codings the proxy
// offers, in its order of preference, the smallest response worth
// compressing, how hard to try, and which media types to compress.
// A response is compressed only when the client accepts one of the
// algorithms (Accept-Encoding), it has no Content-Encoding yet, it is not
// a partial (206), 204 or 304 answer, and it does not say
// Cache-Control: no-transform.
type Compress struct {
	// Algorithms are the codings offered, most preferred first: zstd and
	// gzip. Among those the client accepts with the same q-value the
	// first listed wins. Default [zstd, gzip].
	Algorithms []string `yaml:"algorithms"`
	// MinSize is the smallest response body compressed. A response whose
	// length is not known in advance (chunked, a stream) is held until
	// this much of it has come or it ended. Default 1KiB; 0 compresses
	// every eligible response; at most 32KiB.
	MinSize *Size `yaml:"min_size"`
	// Level trades CPU for size: fastest, default or best. Default
	// "default".
	Level string `yaml:"level"`
	// ContentTypes are the media types compressed: "type/subtype", or
	// "type/*" for every subtype (text/* does not take in
	// text/event-stream: list it to compress server-sent events).
	// Parameters (charset) are ignored. Default: DefaultCompressTypes.
	ContentTypes []string `yaml:"content_types"`
}

// The compression algorithms and levels.
const (
	CompressGzip = "gzip"
	CompressZstd = "zstd"

	CompressLevelFastest = "fastest"
	CompressLevelDefault = "default"
	CompressLevelBest    = "best"
)

// Compression defaults.
var (
	// DefaultCompressAlgorithms is the default preference: zstd, which is
	// faster than gzip for the same ratio, then gzip for the clients
	// that do not speak zstd.
	DefaultCompressAlgorithms = []string{CompressZstd, CompressGzip}
	// DefaultCompressTypes are text formats that compress well; images,
	// video, archives and fonts other than SVG are compressed already.
	DefaultCompressTypes = []string{
		"text/html", "text/plain", "text/css", "text/xml", "text/javascript", "text/csv", "text/markdown",
		"application/json", "application/javascript", "application/xml", "application/xhtml+xml",
		"application/rss+xml", "application/atom+xml", "application/ld+json", "application/manifest+json",
		"application/problem+json", "application/wasm", "image/svg+xml",
	}
)

const (
	// DefaultCompressMinSize is the default min_size.
	DefaultCompressMinSize = 1 * KiB
	// MaxCompressMinSize bounds min_size: a response of unknown length is
	// held in one 32 KiB copy buffer while the proxy waits for min_size
	// bytes of it.
	MaxCompressMinSize = 32 * KiB
)

// defaultCompress fills in the defaults of a route's compress.
func defaultCompress(r *Route) {
	c := r.Compress
	if c == nil {
		return
	}
	if c.Algorithms == nil {
		c.Algorithms = append([]string(nil), DefaultCompressAlgorithms...)
	}
	if c.MinSize == nil {
		c.MinSize = ptr(DefaultCompressMinSize)
	}
	setDefault(&c.Level, CompressLevelDefault)
	if c.ContentTypes == nil {
		c.ContentTypes = append([]string(nil), DefaultCompressTypes...)
	}
}

// checkCompress checks a route's compress: known, distinct algorithms, a
// known level, min_size within bounds and well-formed media types.
func (v *validator) checkCompress(c *Compress) {
	if v.present(&c.Algorithms) && len(c.Algorithms) == 0 {
		v.errorf(&c.Algorithms, "compress.algorithms is empty; list gzip, zstd or both (or remove compress)")
	}
	seen := map[string]int{}
	for i, a := range c.Algorithms {
		switch a {
		case CompressGzip, CompressZstd:
			if first, dup := seen[a]; dup {
				v.errorf(&c.Algorithms[i], "compress.algorithms lists %q twice (first at line %d)", a, v.line(&c.Algorithms[first]))
				continue
			}
			seen[a] = i
		default:
			v.errorf(&c.Algorithms[i], "unknown compression algorithm %q (known: gzip, zstd)", a)
		}
	}
	switch c.Level {
	case "", CompressLevelFastest, CompressLevelDefault, CompressLevelBest:
	default:
		v.errorf(&c.Level, "unknown compress.level %q (known: fastest, default, best)", c.Level)
	}
	if c.MinSize != nil && *c.MinSize > MaxCompressMinSize {
		v.errorf(c.MinSize, "compress.min_size %s is more than %s, the most of a response of unknown length the proxy holds while it decides", *c.MinSize, MaxCompressMinSize)
	}
	if v.present(&c.ContentTypes) && len(c.ContentTypes) == 0 {
		v.errorf(&c.ContentTypes, "compress.content_types is empty; list the media types to compress (or remove compress)")
	}
	for i, ct := range c.ContentTypes {
		if err := checkMediaRange(ct); err != nil {
			v.errorf(&c.ContentTypes[i], "compress.content_types: %v", err)
		}
	}
}

// checkMediaRange checks a content_types entry: type/subtype, type/* or
// */*, without parameters.
func checkMediaRange(s string) error {
	typ, sub, ok := strings.Cut(s, "/")
	switch {
	case strings.Contains(s, ";"):
		return fmt.Errorf("%q has parameters; list the media type alone (%q)", s, strings.TrimSpace(s[:strings.IndexByte(s, ';')]))
	case !ok || !isToken(typ) || !isToken(sub):
		return fmt.Errorf("%q is not a media type like \"text/html\" or \"text/*\"", s)
	case typ == "*" && sub != "*":
		return fmt.Errorf("%q is not a media type like \"text/html\" or \"text/*\"", s)
	}
	return nil
}
