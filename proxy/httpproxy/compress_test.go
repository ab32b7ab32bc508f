package httpproxy

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"testing"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
)

// noSeries is a route without metrics.
func noSeries(string, string) *httpmetrics.Coding { return nil }

func TestChooseHonoursQValuesThenTheRouteOrder(t *testing.T) {
	p := newCompressPolicy(&config.Route{Compress: &config.Compress{Algorithms: []string{"zstd", "gzip"}}}, noSeries)
	for _, tc := range []struct {
		ae   []string
		want coding
	}{
		{nil, codingNone},
		{[]string{""}, codingNone},
		{[]string{"gzip"}, codingGzip},
		{[]string{"gzip", "zstd"}, codingZstd}, // two fields are one list
		{[]string{"gzip;q=1, zstd;q=0.999"}, codingGzip},
		{[]string{"zstd;q=0.001"}, codingZstd},
		{[]string{"zstd;q=0, gzip;q=0"}, codingNone},
		{[]string{"*"}, codingZstd},
		{[]string{"*;q=0.5, zstd;q=0.2"}, codingGzip}, // gzip by *, over zstd's own lower q
		{[]string{"gzip;foo=bar;q=0.5, zstd;q=0.4"}, codingGzip},
		{[]string{" gzip ; q=0.5 ,zstd ;Q=0.6"}, codingZstd},
		{[]string{"zstd;q=1.5, zstd;q=.5, zstd;q=0.1234, gzip;q=0.1"}, codingGzip}, // malformed weights skip the element
		{[]string{"zstd;q=0.1, zstd;q=0.9, gzip;q=0.5"}, codingZstd},               // listed twice: the higher
		{[]string{"identity, deflate, br"}, codingNone},
	} {
		a := parseAcceptEncoding(tc.ae)
		if got := p.choose(&a); got != tc.want {
			t.Errorf("Accept-Encoding %q: chose %v, want %v", tc.ae, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		a := parseAcceptEncoding([]string{"gzip, deflate, br, zstd;q=0.9"})
		p.choose(&a)
	}); n != 0 {
		t.Errorf("negotiation allocates %v times, want 0", n)
	}
}

func TestContentTypesMatchByTypeAndWildcard(t *testing.T) {
	p := newCompressPolicy(&config.Route{Compress: &config.Compress{
		Algorithms: []string{"gzip"}, ContentTypes: []string{"text/*", "application/json", "image/svg+xml"},
	}}, noSeries)
	for ct, want := range map[string]bool{
		"text/html":                       true,
		"TEXT/HTML; charset=utf-8":        true,
		"application/json":                true,
		" application/JSON ;charset=utf8": true,
		"image/svg+xml":                   true,
		"text/event-stream":               false, // only when listed by name
		"application/json-seq":            false,
		"image/png":                       false,
		"text":                            false,
		"":                                false,
	} {
		if got := p.typeOK([]string{ct}); got != want {
			t.Errorf("Content-Type %q: compressed %v, want %v", ct, got, want)
		}
	}
	sse := newCompressPolicy(&config.Route{Compress: &config.Compress{ContentTypes: []string{"text/event-stream"}}}, noSeries)
	if !sse.typeOK([]string{"text/event-stream"}) {
		t.Errorf("text/event-stream listed by name is not compressed")
	}
	all := newCompressPolicy(&config.Route{Compress: &config.Compress{ContentTypes: []string{"*/*"}}}, noSeries)
	if !all.typeOK([]string{"font/woff2"}) || all.typeOK([]string{"text/event-stream"}) || all.typeOK(nil) {
		t.Errorf("*/* takes in every type but text/event-stream, and no type is not a type")
	}
	grpc := newCompressPolicy(&config.Route{Compress: &config.Compress{ContentTypes: []string{"*/*", "application/grpc"}}}, noSeries)
	for _, ct := range []string{"application/grpc", "application/grpc+proto", "Application/GRPC-Web"} {
		if grpc.typeOK([]string{ct}) {
			t.Errorf("%s is compressed; gRPC never is, even listed", ct)
		}
	}
}

// BenchmarkEncoders compresses a 16 KiB JSON document with each pooled
// encoder as a response would (Reset onto the writer, Write, Close), and
// with the standard library's compress/gzip at its default level for
// comparison: the reason for klauspost/compress.
func BenchmarkEncoders(b *testing.B) {
	var doc bytes.Buffer
	for i := 0; doc.Len() < 16<<10; i++ {
		fmt.Fprintf(&doc, `{"id":%d,"status":"shipped","sku":"A-%03d","qty":%d},`, i, i%997, i%7+1)
	}
	in := doc.Bytes()
	run := func(name string, w interface {
		io.WriteCloser
		Reset(io.Writer)
	}) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			var out countWriter
			out.w = io.Discard
			for b.Loop() {
				w.Reset(&out)
				w.Write(in)
				w.Close()
			}
			b.ReportMetric(float64(out.n)/float64(b.N), "out-B/op")
		})
	}
	std, _ := stdgzip.NewWriterLevel(io.Discard, stdgzip.DefaultCompression)
	run("stdlib-gzip/default", std)
	for _, level := range []int{levelFastest, levelDefault, levelBest} {
		name := [numLevels]string{"default", "fastest", "best"}[level]
		run("gzip/"+name, getEncWriter(codingGzip, level).enc)
		run("zstd/"+name, getEncWriter(codingZstd, level).enc)
	}
}
