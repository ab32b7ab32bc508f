package plane_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoed is what an echo backend received.
type echoed struct {
	Backend string      `json:"backend"`
	URI     string      `json:"uri"`
	Path    string      `json:"path"`
	Host    string      `json:"host"`
	Proto   string      `json:"proto"`
	Header  http.Header `json:"header"`
}

// echoBackend answers every request with what it received, as JSON, and
// a Server field of its own; status, when set, answers with that status
// instead of 200. It records the request URIs it saw.
type echoBackend struct {
	*backend
	mu   sync.Mutex
	uris []string
}

func newEcho(t *testing.T, name string, status int, configure func(*http.Server)) *echoBackend {
	t.Helper()
	e := &echoBackend{}
	e.backend = newBackendWith(t, name, func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.uris = append(e.uris, r.RequestURI)
		e.mu.Unlock()
		w.Header().Set("Server", "echo/"+name)
		w.Header().Set("Content-Type", "application/json")
		if status != 0 {
			w.WriteHeader(status)
		}
		json.NewEncoder(w).Encode(echoed{Backend: name, URI: r.RequestURI, Path: r.URL.Path, Host: r.Host, Proto: r.Proto, Header: r.Header})
	}, configure)
	return e
}

func (e *echoBackend) seenURIs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.uris)
}

// noFollow is a client that hands back redirects instead of following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// echoGet sends a GET with header and decodes the echo backend's answer.
func echoGet(t *testing.T, url string, header map[string]string) (*http.Response, echoed) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var s echoed
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("GET %s: %d %q is not the echo backend's answer: %v", url, resp.StatusCode, body, err)
		}
	}
	return resp, s
}

// rewriteYAML is a one-listener config whose routes (a YAML list, indented
// for routes:) all go to upstream app over targets.
func rewriteYAML(routes string, targets ...string) string {
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
` + routes + `
upstreams:
  app:
    targets: [{address: ` + strings.Join(targets, "}, {address: ") + `}]
`
}

func TestPathRewritesReachTheUpstreamWithTheQueryKept(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /api/}
        upstream: app
        rewrite: {strip_prefix: /api}
      - match: {path_prefix: /slash/}
        upstream: app
        rewrite: {strip_prefix: /slash/}
      - match: {path_prefix: /v1/}
        upstream: app
        rewrite: {replace_prefix: {from: /v1/, to: /v2/}}
      - match: {path_prefix: /u/}
        upstream: app
        rewrite: {regex: {match: '^/u/(\d+)$', replace: '/users/$1/profile'}}
      - match: {path_prefix: /dbl/}
        upstream: app
        rewrite: {replace_prefix: {from: /dbl, to: /x/}}
      - match: {path_prefix: /up/}
        upstream: app
        rewrite: {regex: {match: '^/up/(.*)$', replace: '/../$1'}}
      - match: {path_prefix: /}
        upstream: app`, be.addr()))
	for _, c := range []struct{ in, want string }{
		{"/api/users?x=1&y=2", "/users?x=1&y=2"},
		{"/api/", "/"},                 // the empty rest is "/"
		{"/api/a%2Fb/c", "/a%2Fb/c"},   // escaped form kept
		{"/api//x/../y", "/y"},         // matched and rewritten in normal form
		{"/slash/users?q", "/users?q"}, // a prefix ending in "/" keeps the path's "/"
		{"/slash/", "/"},               //
		{"/v1/orders/7?full=1", "/v2/orders/7?full=1"},
		{"/u/42?tab=a", "/users/42/profile?tab=a"},
		{"/u/abc", "/u/abc"},       // no match: the path goes as it came
		{"/apix/y", "/apix/y"},     // another route, no rewrite
		{"/dbl/a?q=1", "/x/a?q=1"}, // the rewritten path is normalised again
	} {
		resp, s := echoGet(t, p.url("web")+c.in, nil)
		if resp.StatusCode != 200 || s.URI != c.want {
			t.Errorf("GET %s: upstream saw %q (status %d), want %q", c.in, s.URI, resp.StatusCode, c.want)
		}
	}
	n := len(be.seenURIs())
	resp, _ := echoGet(t, p.url("web")+"/up/etc/passwd", nil)
	if resp.StatusCode != 400 || resp.Header.Get("X-Switchboard-Error") != "bad_request" {
		t.Errorf("a rewrite that climbs above the root: %d %q, want 400 bad_request", resp.StatusCode, resp.Header.Get("X-Switchboard-Error"))
	}
	if got := be.seenURIs(); len(got) != n {
		t.Errorf("a rewrite that climbs above the root reached the upstream as %q", got[n:])
	}
}

func TestHostRewriteKeepsTheClientsHostInXForwardedHost(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /in/}
        upstream: app
        rewrite: {host: api.internal:8443}
      - match: {path_prefix: /}
        upstream: app`, be.addr()))
	_, s := echoGet(t, p.url("web")+"/in/x", map[string]string{"Host": "shop.example.com"})
	if s.Host != "api.internal:8443" || s.Header.Get("X-Forwarded-Host") != "shop.example.com" || s.URI != "/in/x" {
		t.Errorf("with rewrite.host: upstream saw Host %q, X-Forwarded-Host %q, URI %q; want api.internal:8443, shop.example.com, /in/x",
			s.Host, s.Header.Get("X-Forwarded-Host"), s.URI)
	}
	_, s = echoGet(t, p.url("web")+"/other", map[string]string{"Host": "shop.example.com"})
	if s.Host != "shop.example.com" {
		t.Errorf("without rewrite.host: upstream saw Host %q, want the client's shop.example.com", s.Host)
	}
}

func TestHeaderRulesWithPlaceholders(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /api/}
        upstream: app
        rewrite: {strip_prefix: /api}
        request_headers:
          set:
            X-Client: "{client_ip}"
            X-Original: "{method} {scheme}://{host}{path}?{query} ({hostport})"
            X-Rid: "{request_id}"
            X-Tenant: "t-{header.x-tenant}-{upstream}"
            X-Braces: "{{literal}}"
            X-Empty: "[{header.X-Absent}]"
          add: {Via: "1.1 switchboard", X-Tag: b}
          remove: [X-Debug]
        response_headers:
          set: {X-Served-By: "{endpoint}", X-Route-Upstream: "{upstream}", X-Path: "{path}"}
          add: {X-Tag: "resp"}
          remove: [Server]`, be.addr()))
	req, _ := http.NewRequest("GET", p.url("web")+"/api/q?a=1", nil)
	req.Host = "Shop.Example.com:8080"
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("X-Debug", "1")
	req.Header.Set("X-Request-Id", "rid-42")
	req.Header.Add("X-Tag", "a")
	req.Header.Set("Via", "1.0 edge")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var s echoed
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	want := map[string][]string{
		"X-Client":   {"127.0.0.1"},
		"X-Original": {"GET http://Shop.Example.com/api/q?a=1 (Shop.Example.com:8080)"},
		"X-Rid":      {"rid-42"},
		"X-Tenant":   {"t-acme-app"},
		"X-Braces":   {"{literal}"},
		"X-Empty":    {"[]"},
		"Via":        {"1.0 edge", "1.1 switchboard"},
		"X-Tag":      {"a", "b"},
		"X-Debug":    nil,
	}
	for k, v := range want {
		if got := s.Header[k]; !slices.Equal(got, v) {
			t.Errorf("upstream saw %s: %q, want %q", k, got, v)
		}
	}
	if s.URI != "/q?a=1" {
		t.Errorf("upstream saw %q, want /q?a=1", s.URI)
	}
	wantResp := map[string][]string{
		"X-Served-By":      {be.addr()},
		"X-Route-Upstream": {"app"},
		"X-Path":           {"/api/q"}, // the client's path, not the rewritten one
		"X-Tag":            {"resp"},
		"Server":           nil,
		"X-Request-Id":     {"rid-42"},
	}
	for k, v := range wantResp {
		if got := resp.Header[k]; !slices.Equal(got, v) {
			t.Errorf("client got response %s: %q, want %q", k, got, v)
		}
	}
}

func TestResponseHeaderRulesSkipSwitchboardsOwnErrors(t *testing.T) {
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /}
        upstream: app
        response_headers: {set: {X-Served-By: "{endpoint}"}}`, deadAddr(t)))
	resp, err := http.Get(p.url("web") + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Switchboard-Error") == "" {
		t.Fatalf("dead upstream: %d, error %q; want switchboard's own 502", resp.StatusCode, resp.Header.Get("X-Switchboard-Error"))
	}
	if v, ok := resp.Header["X-Served-By"]; ok {
		t.Errorf("switchboard's own error carries X-Served-By %q; response rules apply to upstream answers only", v)
	}
}

func TestRetriedAttemptsSendTheRewrittenRequest(t *testing.T) {
	bad := newEcho(t, "bad", http.StatusServiceUnavailable, nil)
	good := newEcho(t, "good", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /api/}
        upstream: app
        retry: {attempts: 2, statuses: [503], backoff_base: 1ms, backoff_max: 2ms}
        rewrite: {strip_prefix: /api, host: inner}
        request_headers: {set: {X-Client: "{client_ip}"}}`, bad.addr(), good.addr()))
	for i := 0; i < 4; i++ {
		resp, s := echoGet(t, p.url("web")+"/api/r?i="+fmt.Sprint(i), nil)
		if resp.StatusCode != 200 || s.Backend != "good" || s.URI != "/r?i="+fmt.Sprint(i) || s.Host != "inner" || s.Header.Get("X-Client") != "127.0.0.1" {
			t.Fatalf("request %d: %d from %q, URI %q, Host %q, X-Client %q; want good's answer to the rewritten request",
				i, resp.StatusCode, s.Backend, s.URI, s.Host, s.Header.Get("X-Client"))
		}
	}
	uris := bad.seenURIs()
	if len(uris) == 0 {
		t.Fatal("the failing endpoint was never tried: round robin over two endpoints must reach it")
	}
	for _, u := range uris {
		if !strings.HasPrefix(u, "/r?i=") {
			t.Errorf("the first attempt went out as %q, not rewritten", u)
		}
	}
}

func TestPathRewriteOverH2CUpstream(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	be := newEcho(t, "h2c", 0, func(s *http.Server) { s.Protocols = &protos })
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - match: {path_prefix: /grpc/}
        upstream: app
        rewrite: {replace_prefix: {from: /grpc/, to: /pkg.Svc/}}
upstreams:
  app:
    protocol: h2c
    targets: [{address: `+be.addr()+`}]
`)
	_, s := echoGet(t, p.url("web")+"/grpc/a%20b?x=1", nil)
	if s.Proto != "HTTP/2.0" || s.URI != "/pkg.Svc/a%20b?x=1" || s.Path != "/pkg.Svc/a b" {
		t.Errorf("h2c upstream saw %s %q (path %q), want HTTP/2.0 /pkg.Svc/a%%20b?x=1 (path /pkg.Svc/a b)", s.Proto, s.URI, s.Path)
	}
}

func TestRedirectRoutes(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /301/}
        redirect: {to: "https://{host}/moved{path}", status: 301}
      - match: {path_prefix: /302/}
        redirect: {to: "/elsewhere"}
      - match: {path_prefix: /303/}
        redirect: {to: "/done?from={path}", status: 303}
      - match: {path_prefix: /307/}
        redirect: {to: "http://{hostport}/t{path}", status: 307}
      - match: {path_prefix: /308/}
        redirect: {https: true}
        response_headers: {set: {Strict-Transport-Security: max-age=60, X-Rid: "{request_id}"}}
      - match: {path_prefix: /port/}
        redirect: {https: true, port: 8443, status: 301}
      - match: {path_prefix: /}
        upstream: app`, be.addr()))
	for _, c := range []struct {
		in       string
		status   int
		location string
	}{
		{"/301/a?q=1", 301, "https://shop.example.com/moved/301/a?q=1"},
		{"/302/a?q=1", 302, "/elsewhere?q=1"},
		{"/303/a?q=1", 303, "/done?from=/303/a"}, // the target has its own query
		{"/307/a", 307, "http://shop.example.com:8080/t/307/a"},
		{"/308/a%2Fb?q=1", 308, "https://shop.example.com/308/a%2Fb?q=1"},
		{"/port/a?q", 301, "https://shop.example.com:8443/port/a?q"},
	} {
		resp, _ := echoGet(t, p.url("web")+c.in, map[string]string{"Host": "shop.example.com:8080", "X-Request-Id": "rid-7"})
		if resp.StatusCode != c.status || resp.Header.Get("Location") != c.location {
			t.Errorf("GET %s: %d Location %q, want %d %q", c.in, resp.StatusCode, resp.Header.Get("Location"), c.status, c.location)
		}
		if resp.ContentLength != 0 {
			t.Errorf("GET %s: a redirect with a body of length %d, want none", c.in, resp.ContentLength)
		}
		if strings.HasPrefix(c.in, "/308/") && (resp.Header.Get("Strict-Transport-Security") != "max-age=60" || resp.Header.Get("X-Rid") != "rid-7") {
			t.Errorf("GET %s: response rules not applied to the redirect: %v", c.in, resp.Header)
		}
	}
	if n := len(be.seenURIs()); n != 0 {
		t.Errorf("the upstream saw %d requests; a redirect route sends nothing upstream", n)
	}
	if got := p.metric("switchboard_http_requests_total", map[string]string{"route": "web/4", "upstream": "", "code": "308"}); got != 1 {
		t.Errorf("switchboard_http_requests_total{route=web/4,code=308} = %v, want 1: redirects count as the route's answers", got)
	}
	if resp, s := echoGet(t, p.url("web")+"/other", nil); resp.StatusCode != 200 || s.URI != "/other" {
		t.Errorf("the route after the redirects: %d %q", resp.StatusCode, s.URI)
	}
}

func TestHedgedAttemptsSendTheRewrittenRequest(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slowSaw := make(chan string, 1)
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		slowSaw <- r.RequestURI + " " + r.Host
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	fast := newEcho(t, "fast", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /api/}
        upstream: app
        retry: {attempts: 2, hedge_after: 30ms}
        rewrite: {strip_prefix: /api, host: inner}`, slow.addr(), fast.addr()))
	// Round robin sends the first attempt to slow, which does not answer:
	// the hedge to fast answers.
	resp, s := echoGet(t, p.url("web")+"/api/h?x=1", nil)
	if resp.StatusCode != 200 || s.Backend != "fast" || s.URI != "/h?x=1" || s.Host != "inner" {
		t.Fatalf("%d from %q: URI %q Host %q; want the hedge's answer to /h?x=1 for inner", resp.StatusCode, s.Backend, s.URI, s.Host)
	}
	if got := <-slowSaw; got != "/h?x=1 inner" {
		t.Errorf("the first attempt went out as %q, want /h?x=1 inner", got)
	}
}

func TestResponseHeaderRulesApplyToFallbackAnswers(t *testing.T) {
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /}
        upstream: app
        fallback:
          on: [retries_exhausted]
          steps: [{type: static, status: 200, headers: {Content-Type: text/plain, Server: fallback}, body: "maintenance"}]
        response_headers: {set: {X-Frame-Options: DENY, X-Up: "{upstream}"}, remove: [Server]}`, deadAddr(t)))
	resp, body := doGet(t, p.url("web")+"/x", nil)
	if resp.StatusCode != 200 || body != "maintenance" || resp.Header.Get("X-Switchboard-Degraded") == "" {
		t.Fatalf("%d %q degraded %q; want the static fallback's answer", resp.StatusCode, body, resp.Header.Get("X-Switchboard-Degraded"))
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Up") != "app" || resp.Header["Server"] != nil {
		t.Errorf("fallback answer headers %v: want X-Frame-Options DENY, X-Up app, no Server", resp.Header)
	}
}

// On a split route, {upstream} names the member the request went to, in
// the request's rules and the response's.
func TestUpstreamPlaceholderNamesTheSplitMemberChosen(t *testing.T) {
	v1, v2 := newEcho(t, "v1", 0, nil), newEcho(t, "v2", 0, nil)
	p := startProxy(t, trafficYAML(`        split:
          - {upstream: v1, weight: 1}
          - {upstream: v2, weight: 1}
        request_headers: {set: {X-Member: "{upstream}"}}
        response_headers: {set: {X-Member: "{upstream}"}}`, map[string][]string{"v1": {v1.addr()}, "v2": {v2.addr()}}, ""))
	got := map[string]int{}
	for i := 0; i < 40 && len(got) < 2; i++ {
		resp, s := echoGet(t, p.url("web")+"/", nil)
		sent := s.Header.Get("X-Member")
		if sent != s.Backend || resp.Header.Get("X-Member") != s.Backend {
			t.Fatalf("request to %s carried X-Member %q and its answer %q; want the member's name both ways", s.Backend, sent, resp.Header.Get("X-Member"))
		}
		got[sent]++
	}
	if len(got) != 2 {
		t.Fatalf("40 requests of a 1:1 split all went to %v", got)
	}
}

// A relative redirect target built from the client's path or headers
// must keep the browser on this host: a Location of "//evil.example" or
// "/\evil.example" (browsers read a backslash as a slash, and drop tabs)
// is another host's address. The proxy escapes what would make it one.
func TestRelativeRedirectsCannotLeaveTheHost(t *testing.T) {
	be := newEcho(t, "a", 0, nil)
	p := startProxy(t, rewriteYAML(`
      - match: {path_prefix: /next}
        redirect: {to: "/{header.X-Next}"}
      - match: {path_prefix: /}
        redirect: {to: "{path}/"}`, be.addr()))
	for _, c := range []struct {
		target, header, location string
	}{
		{`/\evil.example`, "", `/%5Cevil.example/`},
		{"/next", "X-Next: /evil.example", "/%2Fevil.example"},
		{"/next", `X-Next: \evil.example`, "/%5Cevil.example"},
		{"/next", "X-Next: a\tb", "/a%09b"},
		{"/next", "X-Next: a b", "/a%20b"},
		{"/dir", "", "/dir/"},
	} {
		var hdr []string
		if c.header != "" {
			hdr = append(hdr, c.header)
		}
		resp, _ := rawGet(t, p.srv.Addr("web"), c.target, hdr...)
		if resp.StatusCode != 302 || resp.Header.Get("Location") != c.location {
			t.Errorf("GET %s with %q: %d Location %q, want 302 %q", c.target, c.header, resp.StatusCode, resp.Header.Get("Location"), c.location)
		}
	}
}

// HTTP/2's :path may carry spaces, in the query too; the HTTP/1 request
// line sent upstream must still have exactly three parts, with the
// request's own path and query, whether or not a rewrite changed the path.
func TestSpacesFromHTTP2NeverSplitTheUpstreamRequestLine(t *testing.T) {
	lines := make(chan string, 4)
	up := serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimRight(line, "\r\n")
			for { // the header
				if l, err := br.ReadString('\n'); err != nil || l == "\r\n" {
					break
				}
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	p := startProxy(t, withTLS(t, rewriteYAML(`
      - match: {path_prefix: /api/}
        rewrite: {strip_prefix: /api}
        upstream: app
      - match: {path_prefix: /}
        upstream: app`, up)))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	base := strings.Replace(p.url("web"), "http://", "https://", 1)
	for _, c2 := range []struct{ path, query, line string }{
		{"/ok", "q=a HTTP/1.0 /admin", "GET /ok?q=a%20HTTP/1.0%20/admin HTTP/1.1"},
		{"/api/ok", "q=a HTTP/1.0 /admin", "GET /ok?q=a%20HTTP/1.0%20/admin HTTP/1.1"},
		{"/api/o k", "", "GET /o%20k HTTP/1.1"},
	} {
		req, err := http.NewRequest("GET", base, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Path, req.URL.RawQuery = c2.path, c2.query
		req.URL.RawPath = c2.path // sent as it is
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s?%s: %v", c2.path, c2.query, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("%s?%s: %s %d", c2.path, c2.query, resp.Proto, resp.StatusCode)
		}
		select {
		case got := <-lines:
			if got != c2.line {
				t.Errorf("%s?%s: upstream request line %q, want %q", c2.path, c2.query, got, c2.line)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s?%s: the upstream saw no request", c2.path, c2.query)
		}
	}
}
