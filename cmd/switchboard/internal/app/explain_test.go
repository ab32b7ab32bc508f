package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// explainYAML is a listener whose routes each test one condition, in
// front of an upstream fed by the embedded registry with active checks,
// and a last route with a per-user rate limit of 3, a concurrency limit
// and a breaker.
const explainYAML = `admin: {listen: 127.0.0.1:0}
log: {level: error}
registry: {listen: 127.0.0.1:0}
listeners:
  - name: web
    listen: %s
    routes:
      - name: admin-api
        match: {host: admin.example.com}
        upstream: api
      - name: orders
        match: {path_prefix: /orders}
        upstream: api
      - name: writes
        match: {path_prefix: /api, methods: [POST, PUT]}
        upstream: api
      - name: canary
        match: {path_prefix: /api, headers: {X-Env: canary}}
        upstream: api
      - name: main
        match: {path_prefix: /api}
        upstream: api
        rate_limit: [{name: per_user, rate: 3/m, burst: 3, key: "header:X-User"}]
        concurrency: {max_in_flight: 10}
        breaker: {consecutive_failures: 5}
  - name: other
    listen: %s
    routes:
      - name: flaky
        match: {path_prefix: /flaky}
        upstream: flaky
        breaker: {consecutive_failures: 2, open_for: 1m}
      - name: sticky
        match: {path_prefix: /sticky}
        upstream: sticky
      - name: other-all
        upstream: api
upstreams:
  flaky:
    targets: [{address: %s}]
  sticky:
    balance: {policy: consistent_hash, hash_key: "header:X-User"}
    targets: [{address: %s}, {address: %s}]
  api:
    discovery: {registry: embedded, service: api, passing_only: false}
    health:
      active: {type: http, path: /health, interval: 500ms, allow_fast: true, timeout: 400ms, fall: 1, rise: 1, max_backoff: 500ms}
`

// explainFixture is a running switchboard of explainYAML with three
// instances: up (healthy), sick (its /health answers 500) and critical
// (its TTL check failed in the registry).
type explainFixture struct {
	admin, listen  string
	other          string    // the listener with the flaky and sticky routes
	sticky         [2]string // the consistent_hash upstream's endpoints, answering s0 and s1
	up, sick, crit string
	sickSt, critSt endpoint.Status
}

func startExplainFixture(t *testing.T) *explainFixture {
	t.Helper()
	healthy := func(ok bool) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" && !ok {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		return s
	}
	up, sick, crit := healthy(true), healthy(false), healthy(true)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	f := &explainFixture{listen: freeAddr(t), other: freeAddr(t), up: hostport(up), sick: hostport(sick), crit: hostport(crit)}
	f.sticky = [2]string{hostport(named(t, "s0")), hostport(named(t, "s1"))}
	a, _ := serve(t, fmt.Sprintf(explainYAML, f.listen, f.other, hostport(failing), f.sticky[0], f.sticky[1]))
	f.admin = a.AdminAddr()
	c, err := consul.NewClient(&consul.Config{Address: a.RegistryAddr()})
	if err != nil {
		t.Fatal(err)
	}
	for id, addr := range map[string]string{"up": f.up, "sick": f.sick, "crit": f.crit} {
		h, p := splitPort(t, addr)
		err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
			ID: id, Name: "api", Address: h, Port: p,
			Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Agent().FailTTL("service:crit", "disk full"); err != nil {
		t.Fatal(err)
	}
	p := pool(t, a, "api")
	testutil.WaitFor(t, 20*time.Second, "three endpoints, one ready", func() bool {
		set := p.Snapshot()
		return len(set.All) == 3 && len(set.Ready) == 1 && set.Ready[0].Address() == f.up
	})
	for _, ep := range p.Snapshot().All {
		switch ep.Address() {
		case f.sick:
			f.sickSt = ep.Status()
		case f.crit:
			f.critSt = ep.Status()
		}
	}
	if f.critSt.Reason != "registry: critical" || !strings.Contains(f.sickSt.Reason, "HTTP check") {
		t.Fatalf("the fixture's endpoints are not as the test needs: sick %+v, critical %+v", f.sickSt, f.critSt)
	}
	return f
}

// explain asks the admin API; it fails the test unless the answer is want.
func (f *explainFixture) explain(t *testing.T, q url.Values, want int) (*plane.Explanation, string) {
	t.Helper()
	resp, err := http.Get("http://" + f.admin + "/api/v1/explain?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("explain %s: %s, want %d: %s", q.Encode(), resp.Status, want, body)
	}
	var e plane.Explanation
	if want == http.StatusOK {
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("explain %s: %v\n%s", q.Encode(), err, body)
		}
	}
	return &e, string(body)
}

func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	return q
}

// TestExplainNamesTheRouteTheReasonsTheEndpointsAndTheLimits: every route
// before the match gives the exact condition it failed, the upstream's
// endpoints are eligible or out with the reason switchboard holds, and the
// rate limit, concurrency limit and breaker give their answers.
func TestExplainNamesTheRouteTheReasonsTheEndpointsAndTheLimits(t *testing.T) {
	f := startExplainFixture(t)
	e, _ := f.explain(t, query("host", "shop.example.com:8080", "path", "/api/./items", "header", "X-Env: prod", "header", "X-User:alice", "client_ip", "10.1.2.3"), 200)

	rt := e.Routing
	if rt.Listener != "web" || rt.Method != "GET" || rt.Host != "shop.example.com" || rt.Path != "/api/items" || rt.NormalizedFrom != "/api/./items" || rt.Route != "main" || rt.Status != 0 {
		t.Fatalf("routing: %+v; want listener web (the first), GET shop.example.com /api/items normalised from /api/./items, route main", rt)
	}
	wantRoutes := []struct{ name, reason string }{
		{"admin-api", `host differs: "shop.example.com" is not "admin.example.com"`},
		{"orders", `path prefix differs: "/api/items" does not start with "/orders"`},
		{"writes", `method not allowed: GET is not one of POST, PUT`},
		{"canary", `header X-Env value differs: "prod" is not "canary"`},
		{"main", ""},
	}
	if len(rt.Routes) != len(wantRoutes) {
		t.Fatalf("routes checked: %+v, want %d", rt.Routes, len(wantRoutes))
	}
	for i, w := range wantRoutes {
		got := rt.Routes[i]
		if got.Route != w.name || got.Reason != w.reason || got.Matched != (w.reason == "") {
			t.Errorf("route %d: %+v, want %s with reason %q", i, got, w.name, w.reason)
		}
	}

	u := e.Upstream
	if u == nil || u.Name != "api" || u.Policy != "round_robin" || u.Eligible != 1 || u.Total != 3 || u.Panic {
		t.Fatalf("upstream: %+v; want api, round_robin, 1 of 3 eligible", u)
	}
	why := map[string]string{}
	for _, ep := range u.Endpoints {
		if ep.Eligible != (ep.Address == f.up) {
			t.Errorf("endpoint %s eligible=%v", ep.Address, ep.Eligible)
		}
		why[ep.Address] = ep.Why
	}
	wantWhy := map[string]string{f.up: "", f.sick: "unhealthy: " + f.sickSt.Reason, f.crit: "unhealthy: registry: critical"}
	for addr, w := range wantWhy {
		if why[addr] != w {
			t.Errorf("endpoint %s: why %q, want %q", addr, why[addr], w)
		}
	}

	d := e.Limits
	if d == nil || len(d.RateLimits) != 1 || len(d.Concurrency) != 1 || d.Breaker == nil {
		t.Fatalf("limits: %+v; want one rate limit, one concurrency limit and a breaker", d)
	}
	l := d.RateLimits[0]
	if l.Name != "per_user" || l.Algorithm != "token_bucket" || l.Rate != "3/m" || l.Key != "header:X-User" || l.KeyValue != "alice" || !l.KeyFound ||
		!l.Peeked || !l.Allowed || l.Limit != 3 || l.Remaining != 2 {
		t.Errorf("rate limit: %+v; want per_user token_bucket 3/m keyed header:X-User=alice, allowed with 2 of 3 left after it", l)
	}
	if c := d.Concurrency[0]; c.Scope != "route" || c.InFlight != 0 || c.MaxInFlight != 10 || c.Would != "admit" {
		t.Errorf("concurrency: %+v; want route 0 of 10 in flight, admit", c)
	}
	if b := d.Breaker; b.State != "closed" || !b.Allowed {
		t.Errorf("breaker: %+v; want closed, allowed", b)
	}
	if d.Refused != "" {
		t.Errorf("refused by %q, want by nothing", d.Refused)
	}
	// The out endpoints in the pool's order (the registry's).
	want := "route main: would go to upstream api, endpoint chosen by round_robin among 1 of 3 endpoints"
	for _, ep := range u.Endpoints {
		if ep.Address != f.up {
			want += "; " + ep.Address + " is out: " + wantWhy[ep.Address]
		}
	}
	if e.Decision != want {
		t.Errorf("decision:\n got %s\nwant %s", e.Decision, want)
	}

	// A missing header, a path that climbs above the root, no route, and
	// a listener named.
	e, _ = f.explain(t, query("path", "/api/x", "method", "POST"), 200)
	if e.Routing.Route != "writes" || e.Routing.Routes[0].Reason != `host differs: the request has no host, the route wants "admin.example.com"` {
		t.Errorf("POST /api/x: route %q, first reason %q", e.Routing.Route, e.Routing.Routes[0].Reason)
	}
	e, _ = f.explain(t, query("path", "/api/x", "method", "DELETE", "header", "X-Env:canary"), 200)
	if e.Routing.Route != "canary" || e.Routing.Routes[2].Reason != "method not allowed: DELETE is not one of POST, PUT" {
		t.Errorf("DELETE /api/x with X-Env canary: %+v", e.Routing)
	}
	e, _ = f.explain(t, query("path", "/api/x"), 200)
	if e.Routing.Routes[3].Reason != `header X-Env missing: the route wants "canary"` {
		t.Errorf("without X-Env, canary's reason: %q", e.Routing.Routes[3].Reason)
	}
	if l := e.Limits.RateLimits[0]; l.KeyFound || l.Note == "" {
		t.Errorf("without X-User the rate limit's key: %+v; want not found, with a note", l)
	}
	e, _ = f.explain(t, query("path", "/api/../../etc/passwd"), 200)
	if e.Routing.Status != 400 || e.Routing.Route != "" || e.Upstream != nil || !strings.Contains(e.Decision, "400") || !strings.Contains(e.Decision, "climbs above the root") {
		t.Errorf("a path above the root: %+v, decision %q; want 400 before routing", e.Routing, e.Decision)
	}
	e, _ = f.explain(t, query("path", "/elsewhere"), 200)
	if e.Routing.Status != 404 || len(e.Routing.Routes) != 5 || !strings.Contains(e.Decision, "404 no_route") {
		t.Errorf("no route: %+v, decision %q; want 404 after 5 routes", e.Routing, e.Decision)
	}
	e, _ = f.explain(t, query("listener", "other", "path", "/anything"), 200)
	if e.Routing.Listener != "other" || e.Routing.Route != "other-all" {
		t.Errorf("listener other: %+v", e.Routing)
	}
}

// TestExplainTakesNoToken: with a limit of 3, explaining many times leaves
// all 3 for real requests; the 4th is refused, and explain says so then.
func TestExplainTakesNoToken(t *testing.T) {
	f := startExplainFixture(t)
	q := query("path", "/api/items", "header", "X-User: bob")
	for i := range 20 {
		e, _ := f.explain(t, q, 200)
		if l := e.Limits.RateLimits[0]; !l.Allowed || l.Remaining != 2 {
			t.Fatalf("explain %d: %+v; want allowed with 2 left after it, every time", i+1, l)
		}
	}
	c := &http.Client{Timeout: 10 * time.Second}
	send := func() int {
		req, _ := http.NewRequest("GET", "http://"+f.listen+"/api/items", nil)
		req.Header.Set("X-User", "bob")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 {
		if code := send(); code != 200 {
			t.Fatalf("real request %d after the explains: %d, want 200", i+1, code)
		}
	}
	e, _ := f.explain(t, q, 200)
	l := e.Limits.RateLimits[0]
	if l.Allowed || l.Remaining != 0 || l.RetryIn == "" || e.Limits.Refused != "rate limit per_user" ||
		!strings.HasPrefix(e.Decision, "route main would refuse it now (rate limit per_user); otherwise would go to upstream api") {
		t.Fatalf("after 3 requests: %+v, decision %q; want refused by per_user", l, e.Decision)
	}
	if code := send(); code != http.StatusTooManyRequests {
		t.Fatalf("4th real request: %d, want 429 as explain said", code)
	}
}

// TestExplainSaysAnOpenBreakerRefuses: after the failures that open a
// route's breaker, explain says the breaker refuses, and for how long.
func TestExplainSaysAnOpenBreakerRefuses(t *testing.T) {
	f := startExplainFixture(t)
	q := query("listener", "other", "path", "/flaky/1")
	e, _ := f.explain(t, q, 200)
	if b := e.Limits.Breaker; b == nil || b.State != "closed" || !b.Allowed {
		t.Fatalf("before any failure: breaker %+v, want closed", b)
	}
	for i := range 2 {
		resp, err := http.Get("http://" + f.other + "/flaky/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 500 {
			t.Fatalf("request %d: %d, want the upstream's 500", i+1, resp.StatusCode)
		}
	}
	e, _ = f.explain(t, q, 200)
	b := e.Limits.Breaker
	if b == nil || b.State != "open" || b.Allowed || b.HalfOpenIn == "" || e.Limits.Refused != "route breaker" ||
		!strings.HasPrefix(e.Decision, "route flaky would refuse it now (route breaker); otherwise would go to upstream flaky") {
		t.Fatalf("after 2 failures: breaker %+v, decision %q; want open and refusing", b, e.Decision)
	}
	if d, err := time.ParseDuration(b.HalfOpenIn); err != nil || d <= 0 || d > time.Minute {
		t.Fatalf("half_open_in %q: want a duration within open_for 1m", b.HalfOpenIn)
	}
}

// TestExplainSaysWhereAKeyHashes: for consistent_hash, explain names the
// endpoint a request's key is kept on, and real requests with that key go
// there.
func TestExplainSaysWhereAKeyHashes(t *testing.T) {
	f := startExplainFixture(t)
	for _, user := range []string{"alice", "bob", "carol", "dave"} {
		e, _ := f.explain(t, query("listener", "other", "path", "/sticky", "header", "X-User: "+user), 200)
		u := e.Upstream
		if u.Policy != "consistent_hash" || u.HashKey != "header:X-User" || !u.HashKeyFound || u.HashKeyValue != user || u.HashesTo == "" {
			t.Fatalf("%s: upstream %+v; want consistent_hash keeping header:X-User=%s on an endpoint", user, u, user)
		}
		if !strings.Contains(e.Decision, fmt.Sprintf(`by the key header:X-User=%q, which it keeps on %s`, user, u.HashesTo)) {
			t.Errorf("%s: decision %q does not name %s", user, e.Decision, u.HashesTo)
		}
		req, _ := http.NewRequest("GET", "http://"+f.other+"/sticky", nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got string
		switch string(body) {
		case "s0":
			got = f.sticky[0]
		case "s1":
			got = f.sticky[1]
		}
		if got != u.HashesTo {
			t.Errorf("%s: explain says %s, the request went to %s (%q)", user, u.HashesTo, got, body)
		}
	}
	e, _ := f.explain(t, query("listener", "other", "path", "/sticky"), 200)
	if u := e.Upstream; u.HashKeyFound || u.HashesTo != "" || !strings.Contains(e.Decision, "the request has no header:X-User key") {
		t.Errorf("without the key: %+v, decision %q", u, e.Decision)
	}
}

// TestExplainRefusesBadParameters: each bad parameter is a 400 naming it.
func TestExplainRefusesBadParameters(t *testing.T) {
	f := startExplainFixture(t)
	for _, c := range []struct {
		q    url.Values
		want string
	}{
		{query("header", "X-Env canary"), `parameter header: #1 \"X-Env canary\" is not Name:Value`},
		{query("header", "X-A:1", "header", "Bad Name:1"), `parameter header: #2 \"Bad Name:1\" is not Name:Value`},
		{query("listener", "nope"), `listener \"nope\" is not a running http listener`},
		{query("client_ip", "10.0.0"), `parameter client_ip: \"10.0.0\" is not an IP address`},
		{query("path", "api"), `parameter path: \"api\" must start with /`},
		{query("method", "G T"), `parameter method: \"G T\" is not a valid method`},
		{query("hots", "x"), `parameter hots: unknown`},
	} {
		_, body := f.explain(t, c.q, http.StatusBadRequest)
		if !strings.Contains(body, c.want) || !strings.Contains(body, `"code": "bad_request"`) {
			t.Errorf("%s: %s; want an error containing %s", c.q.Encode(), body, c.want)
		}
	}
}
