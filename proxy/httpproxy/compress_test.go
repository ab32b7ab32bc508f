package httpproxy

import (
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
}
