package plane_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchboard-dev/switchboard/config"
)

// seen is what a backend saw of the requests that reached it.
type seen struct {
	mu   sync.Mutex
	n    atomic.Int64
	last http.Header
}

func (s *seen) handler(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		s.mu.Lock()
		s.last = r.Header.Clone()
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, name)
	}
}

func (s *seen) header() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// do sends a request with header to url and returns the answer and its
// body.
func do(t *testing.T, c *http.Client, method, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// errorCode returns the code of a proxy-generated JSON error body.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct{ Error, Code string }
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a proxy error body: %q", body)
	}
	return e.Code
}

func TestIPAccessListsFollowTrustedProxies(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: behind-lb
    listen: 127.0.0.1:0
    trusted_proxies: [127.0.0.0/8]
    routes:
      - name: office
        upstream: app
        access: {allow: [203.0.113.0/24, "2001:db8::/32"], deny: [203.0.113.7]}
  - name: direct
    listen: 127.0.0.1:0
    routes:
      - name: no-loopback
        match: {path_prefix: /x}
        upstream: app
        access: {deny: [127.0.0.1]}
      - name: office-direct
        upstream: app
        access: {allow: [203.0.113.0/24]}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{}
	for _, tc := range []struct {
		xff  string
		want int
	}{
		{"203.0.113.5", 200},
		{"2001:db8::5", 200},
		{"203.0.113.7", 403},                 // deny wins over allow
		{"198.51.100.1", 403},                // not in allow
		{"203.0.113.5, 198.51.100.1", 403},   // the rightmost untrusted hop is the client
		{"198.51.100.1, 203.0.113.5", 200},   // whatever the client wrote further left
		{"203.0.113.5, 127.0.0.9", 200},      // trusted hops are skipped (real_ip_recursive)
		{"203.0.113.5, not-an-address", 403}, // the walk stops at garbage: the trusted peer is the client
		{"", 403},                            // no header: the peer 127.0.0.1 itself
	} {
		h := map[string]string{}
		if tc.xff != "" {
			h["X-Forwarded-For"] = tc.xff
		}
		resp, body := do(t, c, "GET", p.url("behind-lb")+"/", h)
		if resp.StatusCode != tc.want {
			t.Errorf("X-Forwarded-For %q: %d %s, want %d", tc.xff, resp.StatusCode, body, tc.want)
			continue
		}
		if tc.want == 403 && (errorCode(t, body) != "forbidden" || resp.Header.Get("X-Switchboard-Error") != "forbidden") {
			t.Errorf("X-Forwarded-For %q: 403 body %s, header %q; want code forbidden", tc.xff, body, resp.Header.Get("X-Switchboard-Error"))
		}
	}
	// Without trusted_proxies, X-Forwarded-For is the client's to write
	// and counts for nothing.
	if resp, body := do(t, c, "GET", p.url("direct")+"/", map[string]string{"X-Forwarded-For": "203.0.113.5"}); resp.StatusCode != 403 {
		t.Errorf("direct listener, forged X-Forwarded-For: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := do(t, c, "GET", p.url("direct")+"/x", nil); resp.StatusCode != 403 || !strings.Contains(body, "127.0.0.1") {
		t.Errorf("deny 127.0.0.1: %d %s, want 403 naming the address", resp.StatusCode, body)
	}
	if got := s.n.Load(); got != 4 {
		t.Errorf("backend saw %d requests, want the 4 allowed ones", got)
	}
	if got := p.metric("switchboard_http_access_denied_total", map[string]string{"route": "office", "reason": "ip"}); got != 5 {
		t.Errorf("denied{route=office, reason=ip} = %v, want 5", got)
	}
	if got := p.metric("switchboard_http_access_denied_total", map[string]string{"route": "no-loopback", "reason": "ip"}); got != 1 {
		t.Errorf("denied{route=no-loopback, reason=ip} = %v, want 1", got)
	}
}

func hashOf(t testing.TB, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func basic(user, pass string) map[string]string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return map[string]string{"Authorization": r.Header.Get("Authorization")}
}

func TestBasicAuthChecksBcryptOncePerCredentials(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("# staff\nbob:"+hashOf(t, "bob-pw")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: staff
        match: {path_prefix: /staff}
        upstream: app
        basic_auth:
          realm: staff area
          users: {alice: "`+hashOf(t, "alice-pw")+`"}
          users_file: `+users+`
          user_header: X-Auth-User
      - name: keep
        upstream: app
        basic_auth: {users: {alice: "`+hashOf(t, "alice-pw")+`"}, keep_authorization: true}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{}
	url := p.url("web") + "/staff"
	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{"no credentials", nil},
		{"wrong password", basic("alice", "nope")},
		{"unknown user", basic("mallory", "alice-pw")},
		{"not basic", map[string]string{"Authorization": "Bearer alice-pw"}},
	} {
		resp, body := do(t, c, "GET", url, tc.header)
		if resp.StatusCode != 401 || errorCode(t, body) != "unauthorized" || resp.Header.Get("Www-Authenticate") != `Basic realm="staff area", charset="UTF-8"` {
			t.Errorf("%s: %d %s, WWW-Authenticate %q; want 401 unauthorized with the realm's challenge", tc.name, resp.StatusCode, body, resp.Header.Get("Www-Authenticate"))
		}
	}
	if s.n.Load() != 0 {
		t.Fatalf("refused requests reached the backend (%d)", s.n.Load())
	}
	checks := func() float64 {
		return p.metric("switchboard_http_basic_auth_bcrypt_checks_total", map[string]string{"route": "staff"})
	}
	// No credentials and a malformed header cost no bcrypt; the wrong
	// password and the unknown user (checked against a dummy hash, so it
	// takes as long) did.
	if got := checks(); got != 2 {
		t.Errorf("bcrypt checks after the refusals = %v, want 2", got)
	}

	before := checks()
	alice := basic("alice", "alice-pw")
	alice["X-Auth-User"] = "root" // a client cannot name itself
	alice["X_Auth_User"] = "root" // nor under a CGI-style alias (HTTP_X_AUTH_USER)
	for i := 0; i < 3; i++ {
		if resp, body := do(t, c, "GET", url, alice); resp.StatusCode != 200 || body != "app" {
			t.Fatalf("alice, request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if got := checks() - before; got != 1 {
		t.Errorf("three requests with the same good credentials ran bcrypt %v times, want 1 (the rest from the cache)", got)
	}
	h := s.header()
	if v, ok := h["X_auth_user"]; ok {
		t.Errorf("upstream saw the client's X_Auth_User %q", v)
	}
	if h.Get("Authorization") != "" || h.Get("X-Auth-User") != "alice" {
		t.Errorf("upstream saw Authorization %q, X-Auth-User %q; want none and alice", h.Get("Authorization"), h.Get("X-Auth-User"))
	}
	if resp, body := do(t, c, "GET", url, basic("bob", "bob-pw")); resp.StatusCode != 200 || s.header().Get("X-Auth-User") != "bob" {
		t.Errorf("bob from users_file: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, c, "GET", p.url("web")+"/other", basic("alice", "alice-pw")); resp.StatusCode != 200 || s.header().Get("Authorization") == "" {
		t.Errorf("keep_authorization: %d %s, upstream's Authorization %q", resp.StatusCode, body, s.header().Get("Authorization"))
	}
	if got := p.metric("switchboard_http_access_denied_total", map[string]string{"route": "staff", "reason": "basic_auth"}); got != 4 {
		t.Errorf("denied{reason=basic_auth} = %v, want 4", got)
	}
}

// authService is a real forward-auth service: a session cookie "good"
// passes as alice; anything else is sent to log in.
type authService struct {
	mu   sync.Mutex
	last http.Header
	n    atomic.Int64
}

func (a *authService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.n.Add(1)
	a.mu.Lock()
	a.last = r.Header.Clone()
	a.last.Set("X-Method-Seen", r.Method)
	a.mu.Unlock()
	switch {
	case strings.HasPrefix(r.Header.Get("X-Forwarded-Uri"), "/big"):
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(strings.Repeat("x", 4096)))
	case strings.HasPrefix(r.Header.Get("X-Forwarded-Uri"), "/slow"):
		<-r.Context().Done() // until the proxy gives up
	case strings.Contains(r.Header.Get("Cookie"), "session=good"):
		w.Header().Set("X-User", "alice")
		w.Header().Set("X-Groups", "admin")
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Location", "https://login.example.com/?next="+r.Header.Get("X-Forwarded-Uri"))
		w.Header().Set("Set-Cookie", "next=1")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusFound)
		w.Write([]byte("log in first"))
	}
}

func (a *authService) header() http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

func TestForwardAuthPassesDeniesAndFailsClosed(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	auth := &authService{}
	as := newBackend(t, "auth", auth.ServeHTTP)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: down
        match: {path_prefix: /down}
        upstream: app
        forward_auth: {url: "http://`+deadAddr(t)+`/check"}
      - name: app
        upstream: app
        forward_auth:
          url: http://`+as.addr()+`/check?app=1
          timeout: 300ms
          copy_request_headers: [Cookie]
          copy_response_headers: [X-User, X-Groups]
          max_response_bytes: 1KiB
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := p.url("web")

	// Refused: the auth service's answer goes to the client as it was.
	resp, body := do(t, c, "POST", base+"/orders?id=7", map[string]string{"Cookie": "session=bad", "X-Secret": "s"})
	if resp.StatusCode != 302 || body != "log in first" || resp.Header.Get("Location") != "https://login.example.com/?next=/orders?id=7" || resp.Header.Get("Set-Cookie") != "next=1" {
		t.Fatalf("refused: %d %q, header %v", resp.StatusCode, body, resp.Header)
	}
	ah := auth.header()
	host := strings.TrimPrefix(base, "http://")
	for k, want := range map[string]string{
		"X-Method-Seen": "GET", "X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/orders?id=7",
		"X-Forwarded-Host": host, "X-Forwarded-Proto": "http", "X-Forwarded-For": "127.0.0.1",
		"Cookie": "session=bad", "X-Secret": "",
	} {
		if got := ah.Get(k); got != want {
			t.Errorf("auth service saw %s %q, want %q", k, got, want)
		}
	}
	if s.n.Load() != 0 {
		t.Fatal("a refused request reached the backend")
	}

	// Passed: the answer's chosen headers replace the client's.
	resp, body = do(t, c, "GET", base+"/orders", map[string]string{"Cookie": "session=good", "X-User": "root", "X-Groups": "root"})
	if resp.StatusCode != 200 || body != "app" {
		t.Fatalf("passed: %d %s", resp.StatusCode, body)
	}
	h := s.header()
	if h.Get("X-User") != "alice" || h.Get("X-Groups") != "admin" {
		t.Errorf("upstream saw X-User %q, X-Groups %q; want alice, admin", h.Get("X-User"), h.Get("X-Groups"))
	}
	if id := h.Get("X-Request-Id"); id == "" || id != auth.header().Get("X-Request-Id") {
		t.Errorf("request id: upstream %q, auth service %q; want the same", id, auth.header().Get("X-Request-Id"))
	}

	// Nor can a client pass them under a name with underscores, which
	// CGI-style upstreams (PHP, WSGI, Rack) read as the same header
	// (HTTP_X_USER).
	raw := rawExchange(t, strings.TrimPrefix(base, "http://"), "GET /orders HTTP/1.1\r\nHost: shop\r\nCookie: session=good"+
		"\r\nX_User: root\r\nx_groups: root\r\nX-user_: keep\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(raw, "HTTP/1.1 200 ") {
		t.Fatalf("passed with underscore headers: %q", raw)
	}
	h = s.header()
	for k, v := range h {
		if n := strings.ToLower(strings.ReplaceAll(k, "_", "-")); (n == "x-user" || n == "x-groups") && k != "X-User" && k != "X-Groups" {
			t.Errorf("upstream saw the client's %s: %q", k, v)
		}
	}
	if h.Get("X-User") != "alice" || h.Get("X-User_") != "keep" {
		t.Errorf("upstream saw X-User %q, X-User_ %q; want alice, and the other header kept", h.Get("X-User"), h.Get("X-User_"))
	}

	// Failures of the auth service fail closed, with stable codes.
	for _, tc := range []struct {
		path, code string
		status     int
	}{
		{"/down", "auth_unavailable", 503},
		{"/slow", "auth_unavailable", 503},
		{"/big", "auth_failed", 502},
	} {
		resp, body := do(t, c, "GET", base+tc.path, map[string]string{"Cookie": "session=good"})
		if resp.StatusCode != tc.status || errorCode(t, body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.path, resp.StatusCode, body, tc.status, tc.code)
		}
	}
	if s.n.Load() != 2 {
		t.Errorf("backend saw %d requests, want only the two that passed", s.n.Load())
	}
	for route, want := range map[string]float64{"app": 3, "down": 1} {
		if got := p.metric("switchboard_http_access_denied_total", map[string]string{"route": route, "reason": "forward_auth"}); got != want {
			t.Errorf("denied{route=%s, reason=forward_auth} = %v, want %v", route, got, want)
		}
	}
}

func TestCORSPreflightIsAnsweredByTheProxy(t *testing.T) {
	var s seen
	b := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*") // the policy replaces it
		w.Header().Set("Vary", "Accept-Encoding")
		s.handler("app")(w, r)
	})
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: api
        match: {methods: [GET, PUT, DELETE]}
        upstream: app
        cors:
          allow_origins: [https://app.example.com, "https://*.example.org"]
          allow_methods: [GET, PUT]
          allow_headers: [X-Token]
          expose_headers: [X-Total]
          allow_credentials: true
          max_age: 10m
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{}
	url := p.url("web") + "/items"
	pre := func(origin, method, headers string) map[string]string {
		h := map[string]string{"Origin": origin, "Access-Control-Request-Method": method}
		if headers != "" {
			h["Access-Control-Request-Headers"] = headers
		}
		return h
	}
	for _, origin := range []string{"https://app.example.com", "https://a.b.example.org"} {
		resp, body := do(t, c, "OPTIONS", url, pre(origin, "PUT", "x-token"))
		want := map[string]string{
			"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": "GET, PUT",
			"Access-Control-Allow-Headers": "X-Token", "Access-Control-Allow-Credentials": "true",
			"Access-Control-Max-Age": "600",
		}
		if resp.StatusCode != 204 || body != "" {
			t.Errorf("preflight from %s: %d %q, want 204", origin, resp.StatusCode, body)
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("preflight from %s: %s %q, want %q", origin, k, got, v)
			}
		}
	}
	for _, tc := range []struct{ name, origin, method, headers string }{
		{"origin", "https://evil.example.com", "PUT", ""},
		{"origin of the wildcard's own domain", "https://example.org", "GET", ""},
		{"scheme", "http://app.example.com", "GET", ""},
		{"method", "https://app.example.com", "DELETE", ""},
		{"header", "https://app.example.com", "PUT", "x-token, x-other"},
	} {
		resp, body := do(t, c, "OPTIONS", url, pre(tc.origin, tc.method, tc.headers))
		if resp.StatusCode != 403 || errorCode(t, body) != "cors_forbidden" || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight refused for its %s: %d %s, ACAO %q; want 403 cors_forbidden without CORS headers",
				tc.name, resp.StatusCode, body, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	// A preflight for a method the route does not match finds no route,
	// as the request itself would.
	if resp, body := do(t, c, "OPTIONS", url, pre("https://app.example.com", "PATCH", "")); resp.StatusCode != 404 {
		t.Errorf("preflight for PATCH, which no route matches: %d %s, want 404", resp.StatusCode, body)
	}
	if n := s.n.Load(); n != 0 {
		t.Fatalf("the backend saw %d preflights, want none", n)
	}

	resp, body := do(t, c, "GET", url, map[string]string{"Origin": "https://app.example.com"})
	if resp.StatusCode != 200 || body != "app" || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" || resp.Header.Get("Access-Control-Expose-Headers") != "X-Total" ||
		strings.Join(resp.Header.Values("Vary"), ", ") != "Accept-Encoding, Origin" {
		t.Errorf("allowed GET: %d %s, header %v", resp.StatusCode, body, resp.Header)
	}
	resp, _ = do(t, c, "GET", url, map[string]string{"Origin": "https://evil.example.com"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("GET from another origin: %d, ACAO %q (the upstream's must not pass either)", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if got := p.metric("switchboard_http_access_denied_total", map[string]string{"route": "api", "reason": "cors"}); got != 5 {
		t.Errorf("denied{reason=cors} = %v, want 5", got)
	}
}

// TestAccessChecksRunInOrder: the address is judged first, a preflight is
// answered before credentials are asked for (browsers send none), and a
// refusal of credentials carries the CORS headers so that the page can
// read it.
func TestAccessChecksRunInOrder(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: denied
        match: {path_prefix: /denied}
        upstream: app
        access: {deny: [127.0.0.0/8]}
        basic_auth: {users: {alice: "`+hashOf(t, "pw")+`"}}
      - name: api
        upstream: app
        cors: {allow_origins: [https://app.example.com], allow_headers: [Authorization]}
        basic_auth: {users: {alice: "`+hashOf(t, "pw")+`"}}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{}
	if resp, body := do(t, c, "GET", p.url("web")+"/denied", basic("alice", "pw")); resp.StatusCode != 403 || errorCode(t, body) != "forbidden" {
		t.Errorf("denied address with good credentials: %d %s, want 403 forbidden", resp.StatusCode, body)
	}
	resp, _ := do(t, c, "OPTIONS", p.url("web")+"/api", map[string]string{
		"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
	if resp.StatusCode != 204 {
		t.Errorf("preflight on a basic_auth route: %d, want 204 without credentials", resp.StatusCode)
	}
	resp, body := do(t, c, "GET", p.url("web")+"/api", map[string]string{"Origin": "https://app.example.com"})
	if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("GET without credentials: %d %s, ACAO %q; want 401 readable by the origin", resp.StatusCode, body, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if s.n.Load() != 0 {
		t.Errorf("backend saw %d requests, want none", s.n.Load())
	}
}

// TestBasicAuthUsersFileIsReadAgainOnReload: a reload takes the users
// file as it is now, and forgets the cached credentials of a user it no
// longer has.
func TestBasicAuthUsersFileIsReadAgainOnReload(t *testing.T) {
	b := newBackend(t, "app", nil)
	users := filepath.Join(t.TempDir(), "users")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(users, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("bob:" + hashOf(t, "bob-pw") + "\n")
	yaml := `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: staff
        upstream: app
        basic_auth: {users_file: ` + users + `}
upstreams:
  app:
    targets: [{address: ` + b.addr() + `}]
`
	p := startProxy(t, yaml)
	c := &http.Client{}
	if resp, body := do(t, c, "GET", p.url("web")+"/", basic("bob", "bob-pw")); resp.StatusCode != 200 {
		t.Fatalf("bob before the reload: %d %s", resp.StatusCode, body)
	}
	write("carol:" + hashOf(t, "carol-pw") + "\n")
	cfg, err := config.Parse("lb.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if resp, body := do(t, c, "GET", p.url("web")+"/", basic("carol", "carol-pw")); resp.StatusCode != 200 {
		t.Errorf("carol after the reload: %d %s, want 200", resp.StatusCode, body)
	}
	if resp, body := do(t, c, "GET", p.url("web")+"/", basic("bob", "bob-pw")); resp.StatusCode != 401 {
		t.Errorf("bob, removed from the file, after the reload: %d %s, want 401 (not a cached success)", resp.StatusCode, body)
	}

	// A file that went bad fails the reload, and the running users stay.
	write("dave:plaintext\n")
	if _, err := config.Parse("lb.yaml", []byte(yaml)); err == nil || !strings.Contains(err.Error(), users+`:1: the hash of "dave" is not a bcrypt hash`) {
		t.Errorf("a users file with a plain password loads: %v", err)
	}
	if resp, _ := do(t, c, "GET", p.url("web")+"/", basic("carol", "carol-pw")); resp.StatusCode != 200 {
		t.Errorf("carol after a failed reload: %d, want 200", resp.StatusCode)
	}
}

// TestAccessControlOverHTTP2: the checks hold on a TLS listener's HTTP/2
// connections (served by net/http, not the HTTP/1 engine) too.
func TestAccessControlOverHTTP2(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	p := startProxy(t, withTLS(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: api
        upstream: app
        cors: {allow_origins: [https://app.example.com], allow_headers: [Authorization]}
        basic_auth: {users: {alice: "`+hashOf(t, "pw")+`"}}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	url := strings.Replace(p.url("web"), "http://", "https://", 1) + "/x"
	resp, _ := do(t, c, "OPTIONS", url, map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET"})
	if resp.ProtoMajor != 2 || resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("preflight: %s %d, ACAO %q; want HTTP/2 204", resp.Proto, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if resp, body := do(t, c, "GET", url, nil); resp.StatusCode != 401 || errorCode(t, body) != "unauthorized" {
		t.Errorf("no credentials: %d %s", resp.StatusCode, body)
	}
	h := basic("alice", "pw")
	h["Origin"] = "https://app.example.com"
	resp, body := do(t, c, "GET", url, h)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || body != "app" || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("alice: %s %d %s, ACAO %q", resp.Proto, resp.StatusCode, body, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	if s.n.Load() != 1 || s.header().Get("Authorization") != "" {
		t.Errorf("backend saw %d requests, Authorization %q; want 1 without it", s.n.Load(), s.header().Get("Authorization"))
	}
}

// The cache of matched credentials must tell user "alice" with password
// "pre\x00rest" from user "alice\x00pre" with password "rest": the second
// is no user at all.
func TestBasicAuthCacheKeepsUserAndPasswordApart(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - upstream: app
        basic_auth: {users: {alice: "`+hashOf(t, "pre\x00rest")+`"}, user_header: X-Auth-User}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	c := &http.Client{}
	if resp, body := do(t, c, "GET", p.url("web")+"/", basic("alice", "pre\x00rest")); resp.StatusCode != 200 || s.header().Get("X-Auth-User") != "alice" {
		t.Fatalf("alice: %d %s, X-Auth-User %q", resp.StatusCode, body, s.header().Get("X-Auth-User"))
	}
	if resp, body := do(t, c, "GET", p.url("web")+"/", basic("alice\x00pre", "rest")); resp.StatusCode != 401 {
		t.Errorf("user %q with the rest of alice's password: %d %s, want 401", "alice\x00pre", resp.StatusCode, body)
	}
	if s.n.Load() != 1 {
		t.Errorf("backend saw %d requests, want 1", s.n.Load())
	}
}

// A client names hop-by-hop headers in Connection, and the proxy drops
// them; that must be the client's own headers only, never those the proxy
// vouches for after its checks: "Connection: X-User" would take the
// forward auth service's X-User (or basic auth's user_header) off the
// request the upstream gets, as if no one had logged in.
func TestConnectionCannotRemoveTheHeadersTheProxyVouchesFor(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	auth := &authService{}
	as := newBackend(t, "auth", auth.ServeHTTP)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - match: {path_prefix: /basic}
        upstream: app
        basic_auth: {users: {alice: "`+hashOf(t, "pw")+`"}, user_header: X-Auth-User}
      - match: {path_prefix: /}
        upstream: app
        forward_auth: {url: "http://`+as.addr()+`/check", copy_response_headers: [X-User, X-Groups]}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	addr := strings.TrimPrefix(p.url("web"), "http://")
	auth64 := strings.TrimPrefix(basic("alice", "pw")["Authorization"], "Basic ")
	for _, c := range []struct {
		req  string
		want map[string]string
	}{
		{"GET /orders HTTP/1.1\r\nHost: shop\r\nCookie: session=good\r\nConnection: close, X-User, X-Groups, X-Secret\r\nX-Secret: s\r\n\r\n",
			map[string]string{"X-User": "alice", "X-Groups": "admin", "X-Secret": ""}},
		{"GET /basic HTTP/1.1\r\nHost: shop\r\nAuthorization: Basic " + auth64 + "\r\nConnection: close, X-Auth-User\r\n\r\n",
			map[string]string{"X-Auth-User": "alice"}},
	} {
		if raw := rawExchange(t, addr, c.req); !strings.HasPrefix(raw, "HTTP/1.1 200 ") {
			t.Fatalf("%q: %q", c.req, raw)
		}
		for k, want := range c.want {
			if got := s.header().Get(k); got != want {
				t.Errorf("%q: upstream saw %s %q, want %q", c.req, k, got, want)
			}
		}
	}
}

// The X-Forwarded-* fields (and X-Request-Id) are the proxy's to set, on
// the request to the upstream and on the one to a forward auth service; a
// client's fields that read the same with underscores for dashes
// (X_Forwarded_Uri) must not go along beside them: a CGI-style service
// (PHP, WSGI, Rack) sees both as HTTP_X_FORWARDED_URI and may take the
// client's, deciding on a path the client chose.
func TestForwardedHeaderAliasesReachNeitherTheAuthServiceNorTheUpstream(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	auth := &authService{}
	as := newBackend(t, "auth", auth.ServeHTTP)
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - upstream: app
        forward_auth: {url: "http://`+as.addr()+`/check"}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	raw := rawExchange(t, strings.TrimPrefix(p.url("web"), "http://"), "GET /admin HTTP/1.1\r\nHost: shop\r\nCookie: session=good\r\n"+
		"X_Forwarded_Uri: /public\r\nX_Forwarded_Method: GET\r\nX_Forwarded_For: 10.0.0.1\r\nX_forwarded_proto: https\r\n"+
		"X_Forwarded_Host: bank\r\nX_Request_Id: mine\r\nX_Other: kept\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(raw, "HTTP/1.1 200 ") {
		t.Fatalf("answer: %q", raw)
	}
	for who, h := range map[string]http.Header{"auth service": auth.header(), "upstream": s.header()} {
		for k, v := range h {
			if strings.Contains(k, "_") && k != "X_other" {
				t.Errorf("the %s saw the client's %s: %q", who, k, v)
			}
		}
		if h.Get("X_Other") != "kept" {
			t.Errorf("the %s did not get X_Other, which is no alias", who)
		}
	}
}

// X-Forwarded-For from a trusted proxy names the client; a client that
// lists it in Connection must not have it dropped and so pass as the
// trusted proxy itself (Apache's CVE-2022-31813). The X-Forwarded-*
// fields stay, for the access lists and for the upstream.
func TestConnectionCannotDropXForwardedFor(t *testing.T) {
	var s seen
	b := newBackend(t, "app", s.handler("app"))
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    trusted_proxies: [127.0.0.0/8]
    routes:
      - upstream: app
        access: {deny: [203.0.113.7]}
upstreams:
  app:
    targets: [{address: `+b.addr()+`}]
`)
	addr := strings.TrimPrefix(p.url("web"), "http://")
	req := func(xff string) string {
		return "GET / HTTP/1.1\r\nHost: shop\r\nX-Forwarded-For: " + xff + "\r\nConnection: close, X-Forwarded-For\r\n\r\n"
	}
	if raw := rawExchange(t, addr, req("203.0.113.7")); !strings.HasPrefix(raw, "HTTP/1.1 403 ") {
		t.Errorf("a denied client naming X-Forwarded-For in Connection: %q, want 403", raw)
	}
	if raw := rawExchange(t, addr, req("203.0.113.5")); !strings.HasPrefix(raw, "HTTP/1.1 200 ") {
		t.Fatalf("an allowed client: %q", raw)
	}
	if got := s.header().Get("X-Forwarded-For"); got != "203.0.113.5, 127.0.0.1" {
		t.Errorf("upstream saw X-Forwarded-For %q, want the client's chain with the peer appended", got)
	}
}
