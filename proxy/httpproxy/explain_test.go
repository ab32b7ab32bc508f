package httpproxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// explainTable is a table whose routes each test one kind of condition.
func explainTable(tb testing.TB) *Table {
	tb.Helper()
	lc := &config.Listener{Name: "web", Routes: []config.Route{
		{Name: "wild", Match: config.Match{Host: "*.Example.com", PathPrefix: "/w"}},
		{Name: "exact", Match: config.Match{Host: "api.example.com", PathPrefix: "/"}},
		{Name: "writes", Match: config.Match{PathPrefix: "/orders", Methods: []string{"POST", "PUT"}}},
		{Name: "canary", Match: config.Match{PathPrefix: "/orders", Headers: map[string]string{"x-env": "canary", "X-Team": "a"}}},
		{Name: "orders", Match: config.Match{PathPrefix: "/orders", Methods: []string{"GET"}}},
	}}
	return NewTable(lc, func(string) *pipeline.Route { return nil }, NewMetrics(prometheus.NewRegistry()))
}

// TestExplainAgreesWithTheRouter: over random requests, explain names the
// route match picks, and gives a reason for every route before it.
func TestExplainAgreesWithTheRouter(t *testing.T) {
	tbl := explainTable(t)
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	for i := range 2000 {
		target := pick("/", "/w", "/wx/y", "/orders", "/orders/1", "/ord", "/other")
		r := httptest.NewRequest(pick("GET", "POST", "PUT", "DELETE"), target, nil)
		r.Host = pick("", "api.example.com", "API.example.com:8080", "x.example.com", "example.com", "b.a.example.com", "other.org")
		for _, h := range []string{"X-Env", "X-Team"} {
			if v := pick("", "canary", "a", "prod"); v != "" {
				r.Header.Set(h, v)
			}
		}
		want := tbl.match(r.Clone(r.Context()))
		got := tbl.explain(r)
		name := ""
		if want != nil {
			name = want.name
		}
		if got.Route != name {
			t.Fatalf("request %d (%s %s, host %q, %v): explain says %q, the router %q", i, r.Method, target, r.Host, r.Header, got.Route, name)
		}
		for j, c := range got.Routes {
			last := j == len(got.Routes)-1 && name != ""
			if c.Matched != last || (c.Reason == "") != last {
				t.Fatalf("request %d: route check %d %+v out of place in %+v", i, j, c, got.Routes)
			}
		}
		if name == "" && (len(got.Routes) != len(tbl.routes) || got.Status != http.StatusNotFound) {
			t.Fatalf("request %d: no route, yet %d routes checked and status %d", i, len(got.Routes), got.Status)
		}
	}
}

// TestExplainReasons pins the wording of each kind of reason.
func TestExplainReasons(t *testing.T) {
	tbl := explainTable(t)
	r := httptest.NewRequest("GET", "/w", nil)
	r.Host = "Example.com"
	r.Header.Set("X-Env", "canary")
	got := tbl.explain(r)
	want := []string{
		`host differs: "example.com" is not "*.example.com"`,
		`host differs: "example.com" is not "api.example.com"`,
		`path prefix differs: "/w" does not start with "/orders"`,
	}
	for i, w := range want {
		if got.Routes[i].Reason != w {
			t.Errorf("route %s: %q, want %q", got.Routes[i].Route, got.Routes[i].Reason, w)
		}
	}
	r = httptest.NewRequest("GET", "/orders//1/./", nil)
	r.Host = ""
	r.Header.Set("X-Env", "canary")
	got = tbl.explain(r)
	if got.Route != "orders" || got.Path != "/orders/1/" || got.NormalizedFrom != "/orders//1/./" {
		t.Fatalf("GET /orders//1/./: %+v", got)
	}
	for i, w := range []string{
		`host differs: the request has no host, the route wants "*.example.com"`,
		`host differs: the request has no host, the route wants "api.example.com"`,
		`method not allowed: GET is not one of POST, PUT`,
		`header X-Team missing: the route wants "a"`,
	} {
		if got.Routes[i].Reason != w {
			t.Errorf("route %s: %q, want %q", got.Routes[i].Route, got.Routes[i].Reason, w)
		}
	}
	r = httptest.NewRequest("GET", "/orders/%2e%2e/%2e%2e/x", nil)
	got = tbl.explain(r)
	if got.Status != http.StatusBadRequest || len(got.Routes) != 0 || got.Path != "/orders/%2e%2e/%2e%2e/x" {
		t.Fatalf("a path above the root: %+v, want 400 before any route", got)
	}
}

// BenchmarkTableMatch is the router's cost for a request that the last of
// five routes matches (every condition kind tried on the way).
func BenchmarkTableMatch(b *testing.B) {
	tbl := explainTable(b)
	r := httptest.NewRequest("GET", "/orders/1", nil)
	r.Host = "shop.example.com"
	r.Header.Set("X-Env", "canary")
	b.ReportAllocs()
	for b.Loop() {
		if rt := tbl.match(r); rt == nil || rt.name != "orders" {
			b.Fatal(fmt.Sprint("matched ", rt))
		}
	}
}
