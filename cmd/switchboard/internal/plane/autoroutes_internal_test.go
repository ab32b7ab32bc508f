package plane

import (
	"slices"
	"testing"
)

func TestAutoRoutesParseAndOrder(t *testing.T) {
	services := map[string][]string{
		"aaa":   {"urlprefix-*.example.com/"},
		"zzz":   {"urlprefix-api.example.com/"},
		"all":   {"urlprefix-/"},
		"deep":  {"urlprefix-/orders/v2", "urlprefix-/orders/v2"},
		"other": {"urlprefix-/orders/v2", "urlprefix-/x strip=/x", "urlprefix-host:80/y", "urlprefix-", "plain"},
	}
	var got []string
	for _, r := range routesOf(services) {
		got = append(got, r.service+" "+r.host+r.prefix)
	}
	want := []string{
		"zzz api.example.com/", // exact host first, even with a shorter prefix
		"aaa *.example.com/",   // then wildcard hosts
		"deep /orders/v2",      // then any host, longest prefix first; "other" asked for the same route later by name
		"all /",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("auto routes\n got %q\nwant %q", got, want)
	}
}
