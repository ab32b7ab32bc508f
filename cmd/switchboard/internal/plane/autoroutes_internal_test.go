package plane

import (
	"slices"
	"testing"
)

func TestAutoRoutesParseAndOrder(t *testing.T) {
	services := map[string][]string{
		"aaa":  {"urlprefix-*.example.com/"},
		"zzz":  {"urlprefix-api.example.com/"},
		"all":  {"urlprefix-/"},
		"deep": {"urlprefix-/orders/v2", "urlprefix-/orders/v2"},
		"other": {"urlprefix-/orders/v2", "urlprefix-/x strip=/x", "urlprefix-host:80/y", "urlprefix-", "plain",
			"urlprefix-/p proto=https", "urlprefix-/q strip=q", "urlprefix-/r strip=/r strip=/r", "urlprefix- /s"},
	}
	var got []string
	for _, r := range routesOf(services) {
		got = append(got, r.service+" "+r.host+r.prefix+" strip="+r.strip)
	}
	want := []string{
		"zzz api.example.com/ strip=", // exact host first, even with a shorter prefix
		"aaa *.example.com/ strip=",   // then wildcard hosts
		"deep /orders/v2 strip=",      // then any host, longest prefix first; "other" asked for the same route later by name
		"other /x strip=/x",           // fabio's strip= option; unknown options, a strip that is not a path and a second strip drop the tag
		"all / strip=",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("auto routes\n got %q\nwant %q", got, want)
	}
}
