package plane_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/config"
)

// trafficYAML renders one listener whose route "r" is route (the keys
// under the route's name), over upstreams named by the backends' names.
func trafficYAML(route string, ups map[string][]string, upstreamExtra string) string {
	var b strings.Builder
	b.WriteString(`admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: r
        match: {path_prefix: /}
` + route + `
upstreams:
`)
	for _, name := range []string{"v1", "v2", "v3", "shadow", "app"} {
		addrs, ok := ups[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "  %s:\n%s    targets:\n", name, upstreamExtra)
		for _, a := range addrs {
			fmt.Fprintf(&b, "      - {address: %s}\n", a)
		}
	}
	return b.String()
}

// send makes one request with the given headers (and body, for POST) and
// returns the response with its body read.
func send(t *testing.T, method, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestSplitSharesRequestsByWeightAndCountsEachUnderItsUpstream(t *testing.T) {
	v1, v2 := newBackend(t, "v1", nil), newBackend(t, "v2", nil)
	p := startProxy(t, trafficYAML(`        split:
          - {upstream: v1, weight: 3}
          - {upstream: v2, weight: 1}`, map[string][]string{"v1": {v1.addr()}, "v2": {v2.addr()}}, ""))
	const n = 400
	got := count(hit(t, p.url("web")+"/", n, nil))
	// 100 expected for v2, standard deviation 8.7: 60-140 is 4.6 of them.
	if got["v1"]+got["v2"] != n || got["v2"] < 60 || got["v2"] > 140 {
		t.Fatalf("a 3:1 split answered %v of %d requests, want about 300 and 100", got, n)
	}
	for _, up := range []string{"v1", "v2"} {
		if c := p.metric("switchboard_http_requests_total", map[string]string{"route": "r", "upstream": up, "code": "200"}); int(c) != got[up] {
			t.Errorf("requests counted under upstream %s: %v, want %d", up, c, got[up])
		}
		if c := p.metric("switchboard_split_decisions_total", map[string]string{"route": "r", "upstream": up, "by": "weight"}); int(c) != got[up] {
			t.Errorf("split decisions for %s by weight: %v, want %d", up, c, got[up])
		}
	}
}

func TestStickySplitKeepsEachClientOnOneUpstream(t *testing.T) {
	v1, v2 := newBackend(t, "v1", nil), newBackend(t, "v2", nil)
	p := startProxy(t, trafficYAML(`        split:
          - {upstream: v1, weight: 1}
          - {upstream: v2, weight: 1}
        split_sticky: {key: "cookie:uid"}`, map[string][]string{"v1": {v1.addr()}, "v2": {v2.addr()}}, ""))
	seen := map[string]int{}
	for u := range 24 {
		cookie := map[string]string{"Cookie": fmt.Sprintf("theme=dark; uid=user-%d", u)}
		answers := count(hit(t, p.url("web")+"/", 6, cookie))
		if len(answers) != 1 {
			t.Fatalf("user %d flipped between versions: %v", u, answers)
		}
		for v := range answers {
			seen[v]++
		}
	}
	// Two users in 2^23 would all land on one side.
	if seen["v1"] == 0 || seen["v2"] == 0 {
		t.Fatalf("24 users all went to one member: %v", seen)
	}
	if c := p.metric("switchboard_split_decisions_total", map[string]string{"route": "r", "by": "key"}); c == 0 {
		t.Error("no split decision counted by key")
	}
	// Without the key the choice is the weighted random one: both answer.
	if got := count(hit(t, p.url("web")+"/", 60, nil)); got["v1"] == 0 || got["v2"] == 0 {
		t.Errorf("requests without the key all went to one member: %v", got)
	}
}

func TestCanaryHeaderOrCookieOptsIn(t *testing.T) {
	v1, v2 := newBackend(t, "v1", nil), newBackend(t, "v2", nil)
	p := startProxy(t, trafficYAML(`        upstream: v1
        canary: {upstream: v2, header: {X-Canary: "1"}, cookie: {canary: "1"}}`, map[string][]string{"v1": {v1.addr()}, "v2": {v2.addr()}}, ""))
	url := p.url("web") + "/"
	for _, c := range []struct {
		header map[string]string
		want   string
	}{
		{nil, "v1"},
		{map[string]string{"X-Canary": "1"}, "v2"},
		{map[string]string{"X-Canary": "0"}, "v1"},
		{map[string]string{"Cookie": "a=b; canary=1"}, "v2"},
		{map[string]string{"Cookie": "canary=yes"}, "v1"},
	} {
		if got := hit(t, url, 3, c.header); got[0] != c.want || got[1] != c.want || got[2] != c.want {
			t.Errorf("headers %v: answered by %v, want %s", c.header, got, c.want)
		}
	}
	if c := p.metric("switchboard_split_decisions_total", map[string]string{"route": "r", "upstream": "v2", "by": "canary"}); c != 6 {
		t.Errorf("canary decisions: %v, want 6", c)
	}
	if c := p.metric("switchboard_http_requests_total", map[string]string{"route": "r", "upstream": "v2", "code": "200"}); c != 6 {
		t.Errorf("requests counted under the canary upstream: %v, want 6", c)
	}
}

// TestSplitMembersShareTheRouteRateLimit: the route's limits belong to the
// route, not to each of its upstreams: a burst of 4 admits 4 requests
// across both members, not 4 each.
func TestSplitMembersShareTheRouteRateLimit(t *testing.T) {
	v1, v2 := newBackend(t, "v1", nil), newBackend(t, "v2", nil)
	p := startProxy(t, trafficYAML(`        split:
          - {upstream: v1, weight: 1}
          - {upstream: v2, weight: 1}
        rate_limit: [{rate: 1/m, burst: 4}]`, map[string][]string{"v1": {v1.addr()}, "v2": {v2.addr()}}, ""))
	ok, limited := 0, 0
	for range 12 {
		resp, _ := doGet(t, p.url("web")+"/", nil)
		switch resp.StatusCode {
		case 200:
			ok++
		case 429:
			limited++
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if ok != 4 || limited != 8 {
		t.Fatalf("%d answered, %d limited; want the route's burst of 4 shared by its members", ok, limited)
	}
}

// mirrorSeen is what a shadow backend received.
type mirrorSeen struct {
	method, path, body, mark, host string
}

func TestMirrorSendsACopyToTheShadow(t *testing.T) {
	var primaryMarked atomic.Int32
	primary := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Switchboard-Mirror") != "" {
			primaryMarked.Add(1)
		}
		io.WriteString(w, "app")
	})
	seen := make(chan mirrorSeen, 4)
	shadow := newBackend(t, "shadow", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- mirrorSeen{r.Method, r.URL.RequestURI(), string(b), r.Header.Get("X-Switchboard-Mirror"), r.Host}
		io.WriteString(w, "shadow answer, thrown away")
	})
	p := startProxy(t, trafficYAML(`        upstream: app
        mirror: {upstream: shadow, percent: 100}`, map[string][]string{"app": {primary.addr()}, "shadow": {shadow.addr()}}, ""))
	resp, body := send(t, "POST", p.url("web")+"/orders?id=7", map[string]string{"Host": "shop.example"}, "hello mirror")
	if resp.StatusCode != 200 || body != "app" {
		t.Fatalf("primary answered %d %q", resp.StatusCode, body)
	}
	select {
	case s := <-seen:
		want := mirrorSeen{"POST", "/orders?id=7", "hello mirror", "1", strings.TrimPrefix(p.url("web"), "http://")}
		if s != want {
			t.Errorf("shadow saw %+v, want %+v", s, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shadow received no copy")
	}
	resp, _ = send(t, "GET", p.url("web")+"/x", nil, "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	if s := <-seen; s.method != "GET" || s.path != "/x" || s.body != "" {
		t.Errorf("shadow saw %+v for a GET", s)
	}
	if primaryMarked.Load() != 0 {
		t.Error("the primary request carried the mirror mark")
	}
	p.srv.Shutdown() // waits for the copies in flight
	if c := p.metric("switchboard_mirror_requests_total", map[string]string{"route": "r", "upstream": "shadow", "result": "sent"}); c != 2 {
		t.Errorf("mirror copies counted sent: %v, want 2", c)
	}
}

// TestMirrorThatHangsOrRefusesNeverSlowsOrFailsThePrimary: with the shadow
// holding every copy it gets, the primary still answers every request,
// the copies past max_concurrency are dropped, and a shadow that refuses
// connections costs the primary nothing either.
func TestMirrorThatHangsOrRefusesNeverSlowsOrFailsThePrimary(t *testing.T) {
	primary := newBackend(t, "app", nil)
	entered, release := make(chan struct{}, 16), make(chan struct{})
	shadow := newBackend(t, "shadow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	p := startProxy(t, trafficYAML(`        upstream: app
        mirror: {upstream: shadow, max_concurrency: 2}`, map[string][]string{"app": {primary.addr()}, "shadow": {shadow.addr()}}, ""))
	for i := range 10 {
		if resp, body := send(t, "GET", p.url("web")+"/", nil, ""); resp.StatusCode != 200 || body != "app" {
			t.Fatalf("request %d while the shadow hangs: %d %q", i, resp.StatusCode, body)
		}
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the shadow did not get its two copies")
		}
	}
	if c := p.metric("switchboard_mirror_requests_total", map[string]string{"route": "r", "result": "dropped"}); c != 8 {
		t.Errorf("copies dropped over max_concurrency: %v, want 8", c)
	}
	close(release)
	p.srv.Shutdown()
	if c := p.metric("switchboard_mirror_requests_total", map[string]string{"route": "r", "result": "sent"}); c != 2 {
		t.Errorf("copies sent: %v, want 2", c)
	}

	dead := startProxy(t, trafficYAML(`        upstream: app
        mirror: {upstream: shadow}`, map[string][]string{"app": {primary.addr()}, "shadow": {deadAddr(t)}}, ""))
	for i := range 5 {
		if resp, body := send(t, "GET", dead.url("web")+"/", nil, ""); resp.StatusCode != 200 || body != "app" {
			t.Fatalf("request %d with a refusing shadow: %d %q", i, resp.StatusCode, body)
		}
	}
	dead.srv.Shutdown()
	if c := dead.metric("switchboard_mirror_requests_total", map[string]string{"route": "r", "result": "failed"}); c != 5 {
		t.Errorf("copies to a refusing shadow counted failed: %v, want 5", c)
	}
}

func TestMirrorSkipsBodiesOverMaxBodyOrOfUnknownLength(t *testing.T) {
	primary := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "app got %d", len(b))
	})
	var copies atomic.Int32
	shadow := newBackend(t, "shadow", func(w http.ResponseWriter, r *http.Request) { copies.Add(1) })
	p := startProxy(t, trafficYAML(`        upstream: app
        mirror: {upstream: shadow, max_body: 8}`, map[string][]string{"app": {primary.addr()}, "shadow": {shadow.addr()}}, ""))
	if resp, body := send(t, "POST", p.url("web")+"/", nil, "0123456789"); resp.StatusCode != 200 || body != "app got 10" {
		t.Fatalf("primary with a large body: %d %q", resp.StatusCode, body)
	}
	// Chunked: an io.Reader that is not a known-length type.
	req, _ := http.NewRequest("POST", p.url("web")+"/", io.MultiReader(strings.NewReader("abc")))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "app got 3" {
		t.Fatalf("primary with a chunked body: %d %q", resp.StatusCode, b)
	}
	p.srv.Shutdown()
	if c := p.metric("switchboard_mirror_requests_total", map[string]string{"route": "r", "result": "skipped"}); c != 2 {
		t.Errorf("copies skipped: %v, want 2", c)
	}
	if copies.Load() != 0 {
		t.Errorf("the shadow got %d copies, want none", copies.Load())
	}
}

// stickyCookieOf returns the value of the sb_sticky cookie resp sets, or "".
func stickyCookieOf(resp *http.Response) string {
	for _, c := range resp.Cookies() {
		if c.Name == "sb_sticky" {
			return c.Value
		}
	}
	return ""
}

func TestStickyCookiePinsAClientToItsEndpointUntilItLeaves(t *testing.T) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	ups := map[string][]string{"app": {a.addr(), b.addr(), c.addr()}}
	const cookieCfg = "    sticky_cookie: {ttl: 1h, http_only: true, same_site: lax, secret: 0123456789abcdef0123}\n"
	yaml := trafficYAML("        upstream: app", ups, cookieCfg)
	p := startProxy(t, yaml)
	url := p.url("web") + "/"

	resp, first := send(t, "GET", url, nil, "")
	tok := stickyCookieOf(resp)
	if tok == "" {
		t.Fatalf("no sticky cookie set: %v", resp.Header["Set-Cookie"])
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, "Path=/; Max-Age=3600; HttpOnly; SameSite=Lax") {
		t.Errorf("Set-Cookie %q lacks the configured attributes", sc)
	}
	if strings.Contains(tok, a.addr()) || strings.Contains(tok, "127.0.0.1") {
		t.Errorf("the cookie %q shows the endpoint's address", tok)
	}
	with := map[string]string{"Cookie": "sb_sticky=" + tok}
	for i := range 12 { // round robin would visit every endpoint 4 times
		resp, got := send(t, "GET", url, with, "")
		if got != first {
			t.Fatalf("request %d with the cookie went to %s, want %s", i, got, first)
		}
		if sc := resp.Header.Get("Set-Cookie"); sc != "" {
			t.Fatalf("request %d with a valid cookie got a new one: %q", i, sc)
		}
	}

	// A forged or tampered cookie is ignored: round robin again, and a
	// cookie of the answering endpoint is set.
	forged := map[string]string{"Cookie": "sb_sticky=" + strings.ToUpper(tok[:4]) + tok[4:]}
	if forged["Cookie"] == with["Cookie"] {
		forged["Cookie"] = "sb_sticky=AAAA" + tok[4:]
	}
	answers := map[string]bool{}
	for range 3 {
		resp, got := send(t, "GET", url, forged, "")
		answers[got] = true
		if stickyCookieOf(resp) == "" {
			t.Errorf("a request with a forged cookie got no new cookie")
		}
	}
	if len(answers) != 3 {
		t.Errorf("requests with a forged cookie went to %v, want round robin over all three", answers)
	}

	// The endpoint leaves: the client moves and gets a new cookie.
	var keep []string
	for _, be := range []*backend{a, b, c} {
		if be.name != first {
			keep = append(keep, be.addr())
		}
	}
	cfg, err := config.Parse("reload.yaml", []byte(trafficYAML("        upstream: app", map[string][]string{"app": keep}, cookieCfg)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	resp, moved := send(t, "GET", url, with, "")
	if resp.StatusCode != 200 || moved == first {
		t.Fatalf("after %s left, the request went to %q (%d)", first, moved, resp.StatusCode)
	}
	next := stickyCookieOf(resp)
	if next == "" || next == tok {
		t.Fatalf("after its endpoint left the client got cookie %q, want a new one", next)
	}
	for range 4 {
		if _, got := send(t, "GET", url, map[string]string{"Cookie": "sb_sticky=" + next}, ""); got != moved {
			t.Fatalf("the new cookie did not stick: %s, want %s", got, moved)
		}
	}
}

// TestStickyCookieWithASharedSecretHoldsAcrossInstances: two proxies with
// the same secret honour each other's cookies (a random key would not).
func TestStickyCookieWithASharedSecretHoldsAcrossInstances(t *testing.T) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	yaml := trafficYAML("        upstream: app\n        sticky_cookie: {name: pin, secret: shared-secret-of-16+}",
		map[string][]string{"app": {a.addr(), b.addr(), c.addr()}}, "")
	p1, p2 := startProxy(t, yaml), startProxy(t, yaml)
	resp, first := send(t, "GET", p1.url("web")+"/", nil, "")
	var tok string
	for _, ck := range resp.Cookies() {
		if ck.Name == "pin" {
			tok = ck.Value
		}
	}
	if tok == "" {
		t.Fatal("no cookie named pin")
	}
	for i := range 6 {
		if _, got := send(t, "GET", p2.url("web")+"/", map[string]string{"Cookie": "pin=" + tok}, ""); got != first {
			t.Fatalf("request %d to the second instance went to %s, want %s", i, got, first)
		}
	}
}

// TestMirrorCopiesABufferedBody: with buffer_requests the body is held by
// the proxy, and the copy gets it whole too.
func TestMirrorCopiesABufferedBody(t *testing.T) {
	primary := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "app got %s", b)
	})
	seen := make(chan string, 1)
	shadow := newBackend(t, "shadow", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- string(b)
	})
	p := startProxy(t, trafficYAML(`        upstream: app
        buffer_requests: {memory: 4}
        mirror: {upstream: shadow}`, map[string][]string{"app": {primary.addr()}, "shadow": {shadow.addr()}}, ""))
	if resp, body := send(t, "PUT", p.url("web")+"/", nil, "spilled to a file"); resp.StatusCode != 200 || body != "app got spilled to a file" {
		t.Fatalf("primary: %d %q", resp.StatusCode, body)
	}
	select {
	case got := <-seen:
		if got != "spilled to a file" {
			t.Errorf("the shadow got body %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shadow received no copy")
	}
}

// Explain on a split route names the split and the member this request
// was given, and counts no split decision; on a redirect route it says
// the proxy answers the redirect itself.
func TestExplainOfASplitAndOfARedirect(t *testing.T) {
	v1, v2 := rawBackend(t), rawBackend(t)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: old
        match: {path_prefix: /old}
        redirect: {to: "/new", status: 301}
      - name: r
        match: {path_prefix: /}
        split:
          - {upstream: v1, weight: 95}
          - {upstream: v2, weight: 5}
upstreams:
  v1: {targets: [{address: `+v1+`}]}
  v2: {targets: [{address: `+v2+`}]}
`)
	explain := func(path string) *plane.Explanation {
		r, _ := http.NewRequest("GET", "http://shop.example.com"+path, nil)
		r.RequestURI = path
		e, err := p.srv.Explain("web", r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := explain("/x")
	if e.Routing.Route != "r" || !strings.Contains(e.Decision, "split: v1 95, v2 5; this request: v") {
		t.Fatalf("split route: route %q, decision %q", e.Routing.Route, e.Decision)
	}
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "switchboard_split_decisions_total" && m.GetCounter().GetValue() != 0 {
				t.Fatalf("explaining counted a split decision: %v", m)
			}
		}
	}
	e = explain("/old/page")
	if e.Routing.Route != "old" || e.Routing.Status != 301 || e.Upstream != nil || !strings.Contains(e.Decision, "would be answered 301") {
		t.Fatalf("redirect route: route %q, status %d, decision %q", e.Routing.Route, e.Routing.Status, e.Decision)
	}
}

// A mirrored request's body is kept for the copy as it is read, taking
// memory as it comes: not the whole Content-Length a client declares
// before sending any of it (up to max_body per request, held for as long
// as the client trickles).
func TestMirrorKeepsTheBodyAsItComesNotAsDeclared(t *testing.T) {
	const clients, declared = 20, 4 << 20
	entered := make(chan struct{}, clients)
	release := make(chan struct{})
	primary := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.Copy(io.Discard, r.Body)
	})
	shadow := newBackend(t, "shadow", func(w http.ResponseWriter, r *http.Request) {})
	p := startProxy(t, trafficYAML(`        upstream: app
        mirror: {upstream: shadow, max_body: 8MiB}`, map[string][]string{"app": {primary.addr()}, "shadow": {shadow.addr()}}, ""))
	var stats runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&stats)
	before := stats.HeapAlloc
	var conns []net.Conn
	defer func() {
		close(release)
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", strings.TrimPrefix(p.url("web"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: shop\r\nContent-Length: %d\r\n\r\nx", declared)
	}
	for range clients {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the requests did not all reach the primary")
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&stats)
	// Held: a byte of each body, and what each connection costs anyway;
	// declared, it would be 80 MiB.
	if grown := int64(stats.HeapAlloc) - int64(before); grown > clients*declared/4 {
		t.Errorf("%d requests that declared %d bytes and sent 1 grew the heap by %d MiB", clients, declared, grown>>20)
	}
}
