package registryd

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

const goodReg = `{"Name":"web","ID":"web-1","Port":8080,"Check":{"TTL":"10s"}}`

func TestBadRegistrationsAre400NamingTheFieldAndStoreNothing(t *testing.T) {
	s := startServer(t, Config{})
	url := baseURL(s) + "/v1/agent/service/register"
	for _, tc := range []struct {
		name, body, field string
	}{
		{"missing Name", `{"Port":80}`, "Name: is required"},
		{"wrong type of Port", `{"Name":"a","Port":"80"}`, "Port: expected a number"},
		{"port out of range", `{"Name":"a","Port":70000}`, "Port: 70000 is out of range"},
		{"negative port", `{"Name":"a","Port":-1}`, "Port: -1 is out of range"},
		{"bad TTL", `{"Name":"a","Check":{"TTL":"5x"}}`, `Check.TTL: "5x" is not a duration`},
		{"bad TTL in Checks", `{"Name":"a","Checks":[{"TTL":"1s"},{"TTL":"5x"}]}`, `Checks[1].TTL: "5x" is not a duration`},
		{"wrong type of Tags", `{"Name":"a","Tags":"x"}`, "Tags: expected an array of strings"},
		{"wrong type of Meta", `{"Name":"a","Meta":{"k":1}}`, "Meta: expected an object of string values"},
		{"reserved meta key", `{"Name":"a","Meta":{"consul-x":"1"}}`, "Meta: key \"consul-x\""},
		{"HTTP check without interval", `{"Name":"a","Check":{"HTTP":"http://127.0.0.1:1/"}}`, "Check.Interval: is required"},
		{"two kinds of check", `{"Name":"a","Check":{"TTL":"1s","TCP":"127.0.0.1:1","Interval":"1s"}}`, "Check: exactly one of TTL, HTTP and TCP"},
		{"script check", `{"Name":"a","Check":{"Args":["/bin/true"],"Interval":"1s"}}`, "Check.Args: not supported by the embedded registry (script checks)"},
		{"bad status", `{"Name":"a","Check":{"TTL":"1s","Status":"fine"}}`, `Check.Status: "fine" is not passing`},
		{"connect", `{"Name":"a","Connect":{"Native":true}}`, "Connect: not supported by the embedded registry (Connect)"},
		{"weights", `{"Name":"a","Weights":{"Passing":0}}`, "Weights.Passing: 0 must be at least 1"},
		{"duplicate check IDs", `{"Name":"a","Checks":[{"TTL":"1s","CheckID":"c"},{"TTL":"1s","CheckID":"c"}]}`, `Checks[1].CheckID: "c" is also the ID of Checks[0]`},
		{"not an object", `[1,2]`, "expected a JSON object"},
		{"not JSON", `{"Name":`, "not valid JSON"},
		{"duplicate keys across case", `{"Name":"a","name":"b"}`, "given twice"},
		{"bad TCP", `{"Name":"a","Check":{"TCP":"nohost","Interval":"1s"}}`, `Check.TCP: "nohost" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := currentIndex(s)
			code, body, _ := do(t, http.MethodPut, url, tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d (%s), want 400", code, body)
			}
			if !strings.Contains(body, tc.field) {
				t.Fatalf("body %q does not name the problem %q", body, tc.field)
			}
			if n := serviceCount(s); n != 0 {
				t.Fatalf("a rejected registration stored %d services", n)
			}
			if after := currentIndex(s); after != before {
				t.Fatalf("a rejected registration moved the index from %d to %d", before, after)
			}
		})
	}
}

func TestRegistrationKeysAreCaseInsensitiveWithSnakeCaseAliases(t *testing.T) {
	s := startServer(t, Config{})
	// python-consul sends lowercase keys; Consul also accepts snake_case.
	code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register",
		`{"name":"py","id":"py-1","port":5000,"enabletagoverride":true,"check":{"ttl":"10s","deregister_critical_service_after":"1m"}}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	s.mu.RLock()
	ss := s.services["py-1"]
	s.mu.RUnlock()
	if ss == nil || ss.def.Name != "py" || ss.def.Port != 5000 || !ss.def.EnableTagOverride ||
		len(ss.checks) != 1 || time.Duration(ss.checks[0].def.DeregisterCriticalServiceAfter) != time.Minute {
		t.Fatalf("stored %+v", ss)
	}
}

func TestBodyOverLimitIs413(t *testing.T) {
	s := startServer(t, Config{MaxBodyBytes: 1024})
	big := `{"Name":"a","Notes":"` + strings.Repeat("x", 2048) + `"}`
	code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", big)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d (%s), want 413", code, body)
	}
	if serviceCount(s) != 0 {
		t.Fatal("an oversized body stored a service")
	}
}

func TestUnknownPathIs404AndWrongMethodIs405(t *testing.T) {
	s := startServer(t, Config{})
	code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/kv/foo", "")
	if code != http.StatusNotFound || !strings.Contains(body, "GET /v1/kv/foo is not supported by the embedded registry") {
		t.Fatalf("unknown path: %d %q", code, body)
	}
	code, body, hdr := do(t, http.MethodPost, baseURL(s)+"/v1/agent/service/register", goodReg)
	if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "PUT" || !strings.Contains(body, "method POST is not allowed on /v1/agent/service/register") {
		t.Fatalf("wrong method: %d %q allow %q", code, body, hdr.Get("Allow"))
	}
	code, _, _ = do(t, http.MethodGet, baseURL(s)+"/v1/agent/service/register", "")
	if code != http.StatusMethodNotAllowed {
		t.Fatalf("GET on the register path is %d, want 405 (it is not a service called register)", code)
	}
	code, body, _ = do(t, http.MethodDelete, baseURL(s)+"/v1/health/service/web", "")
	if code != http.StatusMethodNotAllowed || !strings.Contains(body, "allowed: GET") {
		t.Fatalf("DELETE on health: %d %q", code, body)
	}
	code, body, _ = do(t, http.MethodGet, baseURL(s)+"/v1/health/service/web?filter=Service.Port==1", "")
	if code != http.StatusBadRequest || !strings.Contains(body, "filter") {
		t.Fatalf("?filter: %d %q", code, body)
	}
	if serviceCount(s) != 0 {
		t.Fatal("a refused request stored a service")
	}
}

func TestLegacyGETWritesForPythonConsulButNotFromBrowsers(t *testing.T) {
	s := startServer(t, Config{})
	if code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", goodReg); code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
	code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/agent/check/pass/service:web-1", "", "Sec-Fetch-Site", "cross-site")
	if code != http.StatusForbidden || !strings.Contains(body, "use PUT") {
		t.Fatalf("browser GET pass: %d %q, want 403", code, body)
	}
	code, _, _ = do(t, http.MethodGet, baseURL(s)+"/v1/agent/service/deregister/web-1", "", "Origin", "http://evil.example")
	if code != http.StatusForbidden || serviceCount(s) != 1 {
		t.Fatalf("browser GET deregister: %d, services %d; want 403 and the service kept", code, serviceCount(s))
	}
	if code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/agent/check/pass/service:web-1", ""); code != 200 {
		t.Fatalf("library GET pass: %d %s", code, body)
	}
	if code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/agent/service/deregister/web-1", ""); code != 200 || serviceCount(s) != 0 {
		t.Fatalf("library GET deregister: %d %s", code, body)
	}
}

func TestACLWrites(t *testing.T) {
	const token = "s3cret-token"
	s := startServer(t, Config{ACLToken: token})
	url := baseURL(s) + "/v1/agent/service/register"
	code, body, _ := do(t, http.MethodPut, url, goodReg)
	if code != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
		t.Fatalf("no token: %d %q, want 403 Permission denied", code, body)
	}
	code, body, _ = do(t, http.MethodPut, url, goodReg, "X-Consul-Token", "wrong")
	if code != http.StatusForbidden || !strings.Contains(body, "ACL not found") {
		t.Fatalf("wrong token: %d %q, want 403 ACL not found", code, body)
	}
	if serviceCount(s) != 0 {
		t.Fatal("a refused write stored a service")
	}
	for _, tc := range []struct {
		name string
		url  string
		hdr  []string
	}{
		{"X-Consul-Token", url, []string{"X-Consul-Token", token}},
		{"Bearer", url, []string{"Authorization", "Bearer " + token}},
		{"query", url + "?token=" + token, nil},
	} {
		if code, body, _ := do(t, http.MethodPut, tc.url, goodReg, tc.hdr...); code != http.StatusOK {
			t.Fatalf("right token via %s: %d %q", tc.name, code, body)
		}
	}
	// Reads stay open without ACLReads.
	if code, _, _ := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/web", ""); code != http.StatusOK {
		t.Fatalf("read without token and without ACLReads: %d", code)
	}
	// The official client sends its token.
	if err := goClient(t, s, token).Agent().PassTTL("service:web-1", ""); err != nil {
		t.Fatalf("Go client with the token: %v", err)
	}
	if err := goClient(t, s, "nope").Agent().PassTTL("service:web-1", ""); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("Go client with a wrong token: %v, want a 403", err)
	}
}

func TestACLReads(t *testing.T) {
	const token = "read-token"
	s := startServer(t, Config{ACLToken: token, ACLReads: true})
	for _, path := range []string{"/v1/health/service/web", "/v1/catalog/services", "/v1/agent/services", "/v1/agent/checks", "/v1/status/leader"} {
		if code, body, _ := do(t, http.MethodGet, baseURL(s)+path, ""); code != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
			t.Fatalf("GET %s without token: %d %q", path, code, body)
		}
		if code, _, _ := do(t, http.MethodGet, baseURL(s)+path, "", "X-Consul-Token", "bad"); code != http.StatusForbidden {
			t.Fatalf("GET %s with a wrong token: %d", path, code)
		}
		if code, _, _ := do(t, http.MethodGet, baseURL(s)+path, "", "X-Consul-Token", token); code != http.StatusOK {
			t.Fatalf("GET %s with the token: %d", path, code)
		}
	}
}

func TestTokenComparisonUsesConstantTimeCompare(t *testing.T) {
	calls := 0
	constantTimeCompare = func(a, b []byte) int {
		calls++
		if len(a) != 32 || len(b) != 32 {
			t.Errorf("compared %d and %d bytes; want two SHA-256 digests so length does not leak", len(a), len(b))
		}
		return subtle.ConstantTimeCompare(a, b)
	}
	t.Cleanup(func() { constantTimeCompare = subtle.ConstantTimeCompare })
	if !tokenMatches("abc", "abc") || tokenMatches("abc", "abd") || tokenMatches("", "abc") || tokenMatches("abcd", "abc") {
		t.Fatal("tokenMatches gives wrong answers")
	}
	if calls != 4 {
		t.Fatalf("subtle.ConstantTimeCompare called %d times for 4 comparisons", calls)
	}
}

func TestIndexesNeverZeroAndPerService(t *testing.T) {
	s := startServer(t, Config{})
	health := func(name string, q string) uint64 {
		t.Helper()
		code, body, hdr := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/"+name+q, "")
		if code != http.StatusOK {
			t.Fatalf("health %s: %d %s", name, code, body)
		}
		if hdr.Get("X-Consul-KnownLeader") != "true" || hdr.Get("X-Consul-LastContact") != "0" {
			t.Fatalf("missing Consul headers: %v", hdr)
		}
		return headerIndex(t, hdr) // fails on 0
	}
	empty := health("a", "")
	reg := func(body string) {
		t.Helper()
		if code, b, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", body); code != 200 {
			t.Fatalf("register: %d %s", code, b)
		}
	}
	reg(`{"Name":"a","ID":"a1","Check":{"TTL":"1m"}}`)
	a1 := health("a", "")
	if a1 <= empty {
		t.Fatalf("registering a moved its index from %d to %d; want it to grow", empty, a1)
	}
	reg(`{"Name":"b","ID":"b1","Check":{"TTL":"1m"}}`)
	if got := health("a", ""); got != a1 {
		t.Fatalf("a change to b moved a's index from %d to %d", a1, got)
	}
	// The same registration again changes nothing, not even the index.
	reg(`{"Name":"a","ID":"a1","Check":{"TTL":"1m"}}`)
	if got := health("a", ""); got != a1 {
		t.Fatalf("an idempotent re-registration moved the index from %d to %d", a1, got)
	}
	// A heartbeat that leaves the status alone changes nothing either.
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/check/pass/service:a1", "")
	a2 := health("a", "")
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/check/pass/service:a1?note=again", "")
	if got := health("a", ""); got != a2 {
		t.Fatalf("a heartbeat with an unchanged status moved the index from %d to %d", a2, got)
	}
	// Removing the last instance must not move the index backwards.
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/deregister/a1", "")
	a3 := health("a", "")
	if a3 <= a2 {
		t.Fatalf("deregistering the last instance moved the index from %d to %d; it must grow", a2, a3)
	}
	// A caller whose index is behind is answered at once.
	start := time.Now()
	health("b", "?index=1&wait=10s")
	if time.Since(start) > 2*time.Second {
		t.Fatal("a query with an old index blocked")
	}
	// An index ahead of the whole registry (from before a lost state) is
	// answered at once so the client resets.
	start = time.Now()
	health("b", "?index=999999&wait=10s")
	if time.Since(start) > 2*time.Second {
		t.Fatal("a query with an index from the future blocked")
	}
	// A blocking query that sees no change returns after its wait with the
	// same index.
	bi := health("b", "")
	start = time.Now()
	if got := health("b", "?index="+itoa(bi)+"&wait=100ms"); got != bi {
		t.Fatalf("a timed-out blocking query changed the index from %d to %d", bi, got)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 100*time.Millisecond*17/16+time.Second {
		t.Fatalf("wait=100ms blocked %v; want 100ms plus at most 1/16 jitter", el)
	}
	if code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/b?index=x", ""); code != 400 || !strings.Contains(body, "index") {
		t.Fatalf("bad index: %d %s", code, body)
	}
	if code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/b?index=1&wait=soon", ""); code != 400 || !strings.Contains(body, "wait") {
		t.Fatalf("bad wait: %d %s", code, body)
	}
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestWaitIsCappedWithJitter(t *testing.T) {
	if writeTimeout <= maxWait+maxWait/16 {
		t.Fatalf("WriteTimeout %v would cut off a %v blocking query with its jitter", writeTimeout, maxWait+maxWait/16)
	}
	for range 200 {
		r, _ := http.NewRequest(http.MethodGet, "/v1/health/service/x?index=5&wait=1h", nil)
		_, wait, err := parseBlocking(r)
		if err != nil {
			t.Fatal(err)
		}
		if wait < maxWait || wait > maxWait+maxWait/16 {
			t.Fatalf("wait=1h gave %v; want 10m plus up to 10m/16", wait)
		}
		r, _ = http.NewRequest(http.MethodGet, "/v1/health/service/x?index=5", nil)
		if _, wait, _ = parseBlocking(r); wait < defaultWait || wait > defaultWait+defaultWait/16 {
			t.Fatalf("no wait gave %v; want the 5m default plus up to 5m/16", wait)
		}
	}
}

func TestSharedHealthAnswerIsNeverStale(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	for _, r := range []string{
		`{"Name":"c","ID":"c1","Tags":["x"],"Check":{"TTL":"1m","Status":"passing"}}`,
		`{"Name":"c","ID":"c2","Tags":["y"],"Check":{"TTL":"1m"}}`,
	} {
		if code, b, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", r); code != 200 {
			t.Fatalf("register: %d %s", code, b)
		}
	}
	count := func(tag string, passing bool) int {
		es, _, err := c.Health().Service("c", tag, passing, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	// Different filters are different answers.
	if a, b, x, y := count("", false), count("", true), count("x", false), count("y", true); a != 2 || b != 1 || x != 1 || y != 0 {
		t.Fatalf("all %d, passing %d, tag x %d, tag y passing %d; want 2 1 1 0", a, b, x, y)
	}
	// An output-only change (same status, new note) is not a new index but
	// must show in the next answer.
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/check/pass/service:c1?note=first", "")
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/check/pass/service:c1?note=second", "")
	es, _, err := c.Health().Service("c", "x", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := es[0].Checks[1].Output; got != "second" {
		t.Fatalf("output %q after the second note, want %q", got, "second")
	}
	do(t, http.MethodPut, baseURL(s)+"/v1/agent/check/pass/service:c2", "")
	if y := count("y", true); y != 1 {
		t.Fatalf("tag y passing after its check passed: %d, want 1", y)
	}
	code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/c?tag=y&pretty", "")
	if code != 200 || !strings.Contains(body, "\n    {") {
		t.Fatalf("?pretty of a shared answer: %d %q", code, body)
	}
}

// A query's answer must never be served for another query: the shared
// health-answer cache once keyed ?passing as "passing\x01" and joined tags
// with NUL, so ?tag=passing%01 planted "[]" for every ?passing query, and
// ?tag=a%00b for ?tag=a&tag=b.
func TestHealthAnswerCacheKeysNeverCollide(t *testing.T) {
	s := startServer(t, Config{})
	reg := `{"Name":"web","ID":"web-1","Port":80,"Address":"10.0.0.1","Tags":["a","b"],"Check":{"TTL":"1m","Status":"passing"}}`
	if code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", reg); code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
	for _, tc := range []struct{ poison, victim string }{
		{"?tag=passing%01", "?passing"},
		{"?tag=a%00b", "?tag=a&tag=b"},
	} {
		code, body, _ := do(t, http.MethodGet, baseURL(s)+"/v1/health/service/web"+tc.poison, "")
		if code != http.StatusBadRequest || !strings.HasPrefix(body, "tag: ") {
			t.Fatalf("GET %s = %d %q; want 400 naming the tag parameter", tc.poison, code, body)
		}
		code, body, _ = do(t, http.MethodGet, baseURL(s)+"/v1/health/service/web"+tc.victim, "")
		if code != 200 || !strings.Contains(body, `"web-1"`) {
			t.Fatalf("GET %s after GET %s = %d %s; want web-1 listed", tc.victim, tc.poison, code, body)
		}
	}

	// Registered tags may hold any UTF-8, so the cache itself must keep
	// such filters apart too, not only the HTTP parameter check.
	s.mu.RLock()
	planted := string(s.healthJSONLocked("web", []string{"a\x00b"}, false))
	got := string(s.healthJSONLocked("web", []string{"a", "b"}, false))
	s.mu.RUnlock()
	if planted != "[]" || !strings.Contains(got, `"web-1"`) {
		t.Fatalf("tag filter [\"a\\x00b\"] answered %s and then [\"a\",\"b\"] answered %s; want [] and web-1", planted, got)
	}

	pairs := []struct {
		tagsA    []string
		passingA bool
		tagsB    []string
		passingB bool
	}{
		{[]string{"passing\x01"}, false, nil, true},
		{[]string{"a\x00b"}, false, []string{"a", "b"}, false},
		{[]string{""}, false, nil, false},
		{[]string{"", ""}, false, []string{""}, false},
		{[]string{`a"b`}, false, []string{"a", "b"}, false},
		{[]string{`"a"`}, false, []string{"a"}, false},
		{nil, false, nil, true},
	}
	for _, p := range pairs {
		if a, b := healthCacheKey(p.tagsA, p.passingA), healthCacheKey(p.tagsB, p.passingB); a == b {
			t.Errorf("tags %q passing %v and tags %q passing %v share the cache key %q", p.tagsA, p.passingA, p.tagsB, p.passingB, a)
		}
	}
}

func TestControlCharacterInTagIs400(t *testing.T) {
	s := startServer(t, Config{})
	for _, path := range []string{"/v1/health/service/web", "/v1/catalog/service/web"} {
		for _, q := range []string{"?tag=a%0Ab", "?tag=ok&tag=%7F", "?tag=%FF"} {
			code, body, _ := do(t, http.MethodGet, baseURL(s)+path+q, "")
			if code != http.StatusBadRequest || !strings.HasPrefix(body, "tag: ") {
				t.Fatalf("GET %s%s = %d %q; want 400 naming the tag parameter", path, q, code, body)
			}
		}
		if code, body, _ := do(t, http.MethodGet, baseURL(s)+path+"?tag=v%C3%A9rsion%202", ""); code != 200 {
			t.Fatalf("GET %s with a printable non-ASCII tag = %d %q; want 200", path, code, body)
		}
	}
}

// hostReq sends one request to s with the Host header set to host.
func hostReq(t *testing.T, method, url, host, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// DNS rebinding: a page on an attacker's name that resolves to 127.0.0.1
// sends same-origin requests (no CORS preflight) whose Host is that name.
// Without a token, such requests are refused, reads included (an HTTP
// check's output in /v1/agent/checks would otherwise be readable).
func TestForeignHostIsRefusedWithoutToken(t *testing.T) {
	s := startServer(t, Config{})
	_, port, _ := net.SplitHostPort(s.Addr())
	evil := "rebind.attacker.example:" + port
	code, body := hostReq(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", evil,
		`{"Name":"evil","Port":1,"Check":{"HTTP":"http://10.0.0.1/admin","Interval":"10s"}}`,
		"Sec-Fetch-Site", "same-origin", "Origin", "http://"+evil)
	if code != http.StatusForbidden || !strings.Contains(body, `Host "`+evil+`" is refused`) || !strings.Contains(body, "DNS rebinding") {
		t.Fatalf("PUT register with Host %s = %d %q; want 403 naming the Host and DNS rebinding", evil, code, body)
	}
	if n := serviceCount(s); n != 0 {
		t.Fatalf("a refused request stored %d services", n)
	}
	// Without browser headers too: the Host alone decides.
	for _, path := range []string{"/v1/agent/checks", "/v1/health/service/web", "/v1/no/such/path"} {
		if code, body := hostReq(t, http.MethodGet, baseURL(s)+path, evil, ""); code != http.StatusForbidden {
			t.Fatalf("GET %s with Host %s = %d %q; want 403", path, evil, code, body)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "[::1]", "10.1.2.3", "localhost"} {
		if code, body := hostReq(t, http.MethodGet, baseURL(s)+"/v1/agent/services", host, ""); code != 200 {
			t.Fatalf("GET with Host %s = %d %q; want 200", host, code, body)
		}
	}
	// The clients' own requests (Host 127.0.0.1:port) still write.
	if err := goClient(t, s, "").Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "web", ID: "web-1"}); err != nil {
		t.Fatalf("Go client register: %v", err)
	}
}

func TestForeignHostIsAllowedWithTokenOrAsListenHost(t *testing.T) {
	const token = "tok"
	s := startServer(t, Config{ACLToken: token})
	if code, body := hostReq(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", "registry.example:8500", goodReg, "X-Consul-Token", token); code != 200 {
		t.Fatalf("PUT with a token and Host registry.example = %d %q; want 200 (the token is the protection)", code, body)
	}

	// The host name of Config.Listen is allowed without a token. The
	// handler is mounted on a server of our own, since no test machine
	// resolves the name.
	named, err := New(Config{Listen: "registry.internal:8500", Insecure: true, Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { named.Close() })
	ts := httptest.NewServer(named.Handler())
	t.Cleanup(ts.Close)
	if code, body := hostReq(t, http.MethodGet, ts.URL+"/v1/agent/services", "Registry.Internal:8500", ""); code != 200 {
		t.Fatalf("GET with the listen host = %d %q; want 200", code, body)
	}
	code, body := hostReq(t, http.MethodGet, ts.URL+"/v1/agent/services", "other.internal:8500", "")
	if code != http.StatusForbidden || !strings.Contains(body, "localhost or registry.internal") {
		t.Fatalf("GET with another host = %d %q; want 403 naming the allowed listen host", code, body)
	}
}

// Every write, not only the legacy GET ones, is refused when it carries
// the headers browsers add to page-initiated requests, token or not.
func TestBrowserWritesAreRefused(t *testing.T) {
	const token = "tok"
	for _, cfg := range []Config{{}, {ACLToken: token}} {
		s := startServer(t, cfg)
		for _, hdr := range [][]string{
			{"Origin", "http://127.0.0.1:1"},
			{"Referer", "http://127.0.0.1:1/page"},
			{"Sec-Fetch-Site", "same-origin"},
			{"Sec-Fetch-Site", "cross-site"},
		} {
			h := append([]string{"X-Consul-Token", cfg.ACLToken}, hdr...)
			code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", goodReg, h...)
			if code != http.StatusForbidden || !strings.Contains(body, "PUT /v1/agent/service/register from a browser is refused") {
				t.Fatalf("token %q, PUT register with %s: %s = %d %q; want 403", cfg.ACLToken, hdr[0], hdr[1], code, body)
			}
			if n := serviceCount(s); n != 0 {
				t.Fatalf("a refused browser write stored %d services", n)
			}
		}
		// A user-initiated request (Sec-Fetch-Site: none) and a plain
		// client are not page-initiated.
		if code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", goodReg, "X-Consul-Token", cfg.ACLToken, "Sec-Fetch-Site", "none"); code != 200 {
			t.Fatalf("token %q, PUT register without page headers = %d %q; want 200", cfg.ACLToken, code, body)
		}
		// Reads from a page on 127.0.0.1's own origin stay open.
		if code, _, _ := do(t, http.MethodGet, baseURL(s)+"/v1/agent/services", "", "Sec-Fetch-Site", "same-origin"); code != 200 {
			t.Fatalf("token %q, browser read = %d; want 200", cfg.ACLToken, code)
		}
	}
}
