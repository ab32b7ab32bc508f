package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// goodHash is a bcrypt hash (cost 4) of "pw".
const goodHash = "$2a$04$dRg6RcrcuMa3CVnNO/1Neu51uw9scv9eXbPp/fmGOQLo3Cba579UG"

func TestAccessControlLoadsWithDefaults(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("# comment\n\nbob:"+goodHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    trusted_proxies: [10.0.0.0/8, "::ffff:192.0.2.1"]
    routes:
      - upstream: u
        access: {allow: [192.0.2.0/24], deny: [192.0.2.7]}
        basic_auth: {users: {alice: "`+goodHash+`"}, users_file: `+users+`, user_header: x-auth-user}
        forward_auth: {url: "http://auth:9000/check", copy_response_headers: [x-user]}
        cors: {allow_origins: ["HTTPS://App.Example.com:443", "https://*.example.org:8443"], allow_headers: [x-token]}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	r := cfg.Listeners[0].Routes[0]
	if b := r.BasicAuth; b.Realm != "switchboard" || b.UserHeader != "X-Auth-User" {
		t.Errorf("basic_auth = %+v, want realm switchboard and the header name canonical", b)
	}
	if got := r.BasicAuth.AllUsers(); len(got) != 2 || got["alice"] != goodHash || got["bob"] != goodHash {
		t.Errorf("AllUsers = %v, want alice from users and bob from users_file", got)
	}
	if f := r.ForwardAuth; f.Timeout != Duration(5*time.Second) || f.MaxResponseBytes != 64*KiB || f.CopyResponseHeaders[0] != "X-User" {
		t.Errorf("forward_auth = %+v, want timeout 5s, max_response_bytes 64KiB, canonical header names", f)
	}
	c := r.CORS
	if want := []string{"https://app.example.com", "https://*.example.org:8443"}; !slices.Equal(c.AllowOrigins, want) {
		t.Errorf("cors.allow_origins = %q, want %q (lower case, default port left out)", c.AllowOrigins, want)
	}
	if !slices.Equal(c.AllowMethods, []string{"GET", "HEAD", "POST"}) || c.AllowHeaders[0] != "X-Token" {
		t.Errorf("cors = %+v, want the default methods and canonical header names", c)
	}
}

func TestAccessControlProblemsPointAtTheValue(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("bob:"+goodHash+"\ncarol:$2y$10$short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup")
	if err := os.WriteFile(dup, []byte("alice:"+goodHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := problemLines(t, "lb.yaml", `listeners:
  - name: web
    listen: :8080
    trusted_proxies: [10.0.0.0/8, 10.0.0.300]
    routes:
      - upstream: u
        access: {allow: [192.0.2.0/33], deny: [fe80::1%eth0]}
      - upstream: u
        access: {}
      - upstream: u
        basic_auth: {users: {alice: "md5-not-bcrypt", "b:ob": "`+goodHash+`"}, realm: 'say "hi"'}
      - upstream: u
        basic_auth: {users_file: `+users+`}
      - upstream: u
        basic_auth: {users: {alice: "`+goodHash+`"}, users_file: `+dup+`}
      - upstream: u
        basic_auth: {realm: x}
      - upstream: u
        forward_auth: {url: "ftp://auth/check", timeout: 0s, copy_request_headers: ["bad header"]}
      - upstream: u
        forward_auth: {timeout: 1s}
      - upstream: u
        cors: {allow_origins: ["*", "https://app.example.com/path", "https://a.*.example.com"], allow_credentials: true, expose_headers: ["*"], allow_methods: ["GE T"]}
      - upstream: u
        cors: {allow_headers: [X-Token]}
  - name: db
    protocol: tcp
    listen: :5432
    upstream: u
    trusted_proxies: [10.0.0.1]
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	checkLines(t, lines, []string{
		`lb.yaml:4:35: trusted_proxies[1]: "10.0.0.300" is not an IP address or CIDR prefix`,
		`lb.yaml:7:26: access.allow[0]: "192.0.2.0/33" is not an IP address or CIDR prefix`,
		`lb.yaml:7:48: access.deny[0]: "fe80::1%eth0" is not an IP address or CIDR prefix`,
		`lb.yaml:9:9: access needs allow or deny (a list of addresses and CIDR prefixes)`,
		`lb.yaml:11:37: basic_auth.users: the hash of "alice" is not a bcrypt hash (it starts $2a$, $2b$ or $2y$; make one with htpasswd -nB NAME)`,
		`lb.yaml:11:55: basic_auth.users: user name "b:ob" may not contain a colon or a control character`,
		`lb.yaml:11:135: basic_auth.realm "say \"hi\"" may not contain quotes, backslashes or control characters`,
		`lb.yaml:13:34: basic_auth.users_file ` + users + `:2: the hash of "carol" is not a valid bcrypt hash: hashedSecret too short to be a bcrypted password`,
		`lb.yaml:15:30: basic_auth.users: "alice" is also a user of users_file "` + dup + `"; name each user once`,
		`lb.yaml:17:9: basic_auth needs users or users_file`,
		`lb.yaml:19:29: forward_auth.url "ftp://auth/check" must start with http:// or https://`,
		`lb.yaml:19:58: forward_auth.timeout must be positive, got 0s`,
		`lb.yaml:19:85: forward_auth.copy_request_headers[0]: "bad header" is not a valid header name`,
		`lb.yaml:21:9: forward_auth.url (the auth service's http:// or https:// URL) is required`,
		`lb.yaml:23:32: cors.allow_origins: "*" cannot go with allow_credentials: true (browsers refuse it); list the origins`,
		`lb.yaml:23:37: cors.allow_origins[1]: "https://app.example.com/path" is not an origin: leave out any path, query or user (scheme://host[:port])`,
		`lb.yaml:23:69: cors.allow_origins[2]: "https://a.*.example.com": "*" may only be the first label of the host, as in https://*.example.com`,
		`lb.yaml:23:139: cors.expose_headers: "*" means the header named "*" to browsers when allow_credentials is true; list the headers`,
		`lb.yaml:23:161: cors.allow_methods[0]: "GE T" is not a valid HTTP method`,
		`lb.yaml:25:9: cors.allow_origins is required ("*", or origins such as https://app.example.com)`,
		`lb.yaml:30:5: trusted_proxies is for http listeners; a tcp listener forwards connections to its upstream`,
	})
}
