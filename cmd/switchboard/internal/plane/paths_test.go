package plane_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"
)

// filesBackend answers like a static file server that cleans the path it
// is given (as http.FileServer does): /admin/... is the secret. It echoes
// the request target it received in X-Target.
func filesBackend(t *testing.T) *backend {
	return newBackend(t, "files", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Target", r.RequestURI)
		switch p := path.Clean(r.URL.Path); {
		case strings.HasPrefix(p, "/admin/"):
			io.WriteString(w, "SECRET")
		default:
			io.WriteString(w, "PUBLIC")
		}
	})
}

// pathsYAML: /admin needs X-Internal: yes; /public and /a/b are open.
func pathsYAML(b *backend, tlsKeys ...string) string {
	routes := `    routes:
      - match: {path_prefix: /admin, headers: {X-Internal: "yes"}}
        upstream: files
      - match: {path_prefix: /public}
        upstream: files
      - match: {path_prefix: /a/b}
        upstream: files
`
	y := "admin: {enabled: false}\nlisteners:\n  - name: web\n    listen: 127.0.0.1:0\n" + routes
	if len(tlsKeys) == 2 {
		y += "  - name: tls\n    listen: 127.0.0.1:0\n    tls: {cert_file: " + tlsKeys[0] + ", key_file: " + tlsKeys[1] + "}\n" + routes
	}
	return y + "upstreams:\n  files:\n    targets: [{address: " + b.addr() + "}]\n"
}

// rawGet sends one request with target exactly as written (curl
// --path-as-is) and returns the response.
func rawGet(t *testing.T, addr, target string, header ...string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: files.example\r\nConnection: close\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// Issue 16, bug 2: routes matched the raw path, so /public/../admin/x
// matched /public and reached the upstream as is, which resolved it to
// /admin/x. The path is normalised before routing, and the upstream gets
// the normalised target.
func TestDotSegmentsCannotReachAnotherRoute(t *testing.T) {
	b := filesBackend(t)
	p := startProxy(t, pathsYAML(b))
	addr := p.srv.Addr("web")
	for _, target := range []string{
		"/public/../admin/secret.txt",
		"/public/%2e%2e/admin/secret.txt",
		"/public/%2E%2E/admin/secret.txt",
		"/public/.%2e/admin/secret.txt",
		"/public/./../admin/secret.txt",
		"/public//../admin/secret.txt",
	} {
		resp, body := rawGet(t, addr, target)
		if resp.StatusCode != 404 || resp.Header.Get("X-Switchboard-Error") != "no_route" {
			t.Errorf("GET %s without X-Internal: %d %q (upstream saw %q); want 404 no_route: it is /admin/secret.txt",
				target, resp.StatusCode, body, resp.Header.Get("X-Target"))
		}
	}
	for _, tc := range []struct {
		target, header, sent, body string
	}{
		{"/public/../admin/secret.txt", "X-Internal: yes", "/admin/secret.txt", "SECRET"},
		{"/public/%2e%2e/admin/secret.txt", "X-Internal: yes", "/admin/secret.txt", "SECRET"},
		{"//a//b", "", "/a/b", "PUBLIC"},
		{"/a//b///c/./d?x=..//%2e&y=/./", "", "/a/b/c/d?x=..//%2e&y=/./", "PUBLIC"}, // the query as it came
		{"/public/%7Euser/%2e/x", "", "/public/~user/x", "PUBLIC"},
		{"/public/a%2Fb/%2e%2e%2Fadmin", "", "/public/a%2Fb/..%2Fadmin", "PUBLIC"}, // %2F stays data
	} {
		resp, body := rawGet(t, addr, tc.target, tc.header)
		if resp.StatusCode != 200 || body != tc.body || resp.Header.Get("X-Target") != tc.sent {
			t.Errorf("GET %s: %d %q, upstream saw %q; want 200 %q with %q sent upstream",
				tc.target, resp.StatusCode, body, resp.Header.Get("X-Target"), tc.body, tc.sent)
		}
	}
	for _, target := range []string{"/..", "/../public/x", "/public/../../x", "/public/%2e%2e/%2e%2e/x"} {
		resp, body := rawGet(t, addr, target)
		if resp.StatusCode != 400 || resp.Header.Get("X-Switchboard-Error") != "bad_request" {
			t.Errorf("GET %s: %d %q; want 400 bad_request: it climbs above the root", target, resp.StatusCode, body)
		}
	}
}

// The same normalisation holds for HTTP/2 (TLS listeners, net/http's
// server): it happens once, in the front end, before routing.
func TestDotSegmentsCannotReachAnotherRouteOverHTTP2(t *testing.T) {
	b := filesBackend(t)
	cert, key := writeSelfSigned(t)
	p := startProxy(t, pathsYAML(b, cert, key))
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	base := "https://" + p.srv.Addr("tls")
	do := func(target string, internal bool) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		// With RawPath a valid encoding of Path, the client sends :path
		// exactly as written.
		raw, query, _ := strings.Cut(target, "?")
		if req.URL.Path, err = url.PathUnescape(raw); err != nil {
			t.Fatal(err)
		}
		req.URL.RawPath, req.URL.RawQuery = raw, query
		if internal {
			req.Header.Set("X-Internal", "yes")
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Fatalf("GET %s went over %s, want HTTP/2", target, resp.Proto)
		}
		return resp, string(body)
	}
	for _, target := range []string{"/public/../admin/secret.txt", "/public/%2e%2e/admin/secret.txt"} {
		if resp, body := do(target, false); resp.StatusCode != 404 {
			t.Errorf("GET %s over HTTP/2: %d %q; want 404 no_route", target, resp.StatusCode, body)
		}
		if resp, body := do(target, true); resp.StatusCode != 200 || body != "SECRET" || resp.Header.Get("X-Target") != "/admin/secret.txt" {
			t.Errorf("GET %s over HTTP/2 with X-Internal: %d %q, upstream saw %q; want 200 SECRET via /admin/secret.txt",
				target, resp.StatusCode, body, resp.Header.Get("X-Target"))
		}
	}
	if resp, body := do("//a//b?q=..", false); resp.StatusCode != 200 || resp.Header.Get("X-Target") != "/a/b?q=.." {
		t.Errorf("GET //a//b?q=.. over HTTP/2: %d %q, upstream saw %q; want /a/b?q=..", resp.StatusCode, body, resp.Header.Get("X-Target"))
	}
	if resp, body := do("/..", false); resp.StatusCode != 400 {
		t.Errorf("GET /.. over HTTP/2: %d %q; want 400", resp.StatusCode, body)
	}
}
