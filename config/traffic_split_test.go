package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTrafficKeysReportExactProblems pins the problems of split, canary,
// mirror and sticky_cookie at the line and column of the value at fault.
func TestTrafficKeysReportExactProblems(t *testing.T) {
	const ups = "upstreams:\n  v1: {targets: [{address: 'a:1'}]}\n  v2: {targets: [{address: 'b:1'}]}\n"
	route := func(body string) string {
		return "listeners:\n  - name: web\n    listen: ':80'\n    routes:\n      - name: r\n" + body + ups
	}
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"upstream and split", route("        upstream: v1\n        split: [{upstream: v2, weight: 1}]\n"),
			[]string{`7:16: route has both upstream and split; use one`}},
		{"empty split", route("        split: []\n"),
			[]string{`6:16: split must list at least one upstream`}},
		{"split members", route("        split:\n          - {upstream: v1, weight: 0}\n          - {upstream: v1, weight: 5}\n          - {upstream: v3, weight: 2000000}\n          - {weight: 1}\n          - {upstream: v2}\n"),
			[]string{
				`7:36: split[0].weight must be 1 to 1000000, got 0`,
				`8:24: upstream "v1" is in the split twice (first at line 7)`,
				`9:24: split[2].upstream "v3" is not defined (defined: v1, v2)`,
				`9:36: split[2].weight must be 1 to 1000000, got 2000000`,
				`10:13: split[3].upstream is required`,
				`11:13: split[4].weight is required`,
			}},
		{"split_sticky", route("        split: [{upstream: v1, weight: 1}]\n        split_sticky: {key: 'cookie:'}\n"),
			[]string{`7:29: split_sticky.key: "cookie:" needs a name, as in cookie:NAME`}},
		{"split_sticky without split", route("        upstream: v1\n        split_sticky: {key: client_ip}\n"),
			[]string{`7:9: split_sticky needs split`}},
		{"canary", route("        upstream: v1\n        canary: {upstream: nope}\n"),
			[]string{
				`7:9: canary needs a header or a cookie that opts a request in`,
				`7:28: canary.upstream "nope" is not defined (defined: v1, v2)`,
			}},
		{"canary names", route("        upstream: v1\n        canary: {upstream: v2, header: {'X Canary': '1'}, cookie: {'a;b': '1'}}\n"),
			[]string{
				`7:41: canary.header: "X Canary" is not a valid header name`,
				`7:68: canary.cookie: "a;b" is not a valid cookie name`,
			}},
		{"mirror", route("        upstream: v1\n        mirror: {upstream: v1, percent: 150, max_body: -1, max_concurrency: 0}\n"),
			[]string{
				`7:28: mirror.upstream "v1" already serves this route; mirror to another upstream`,
				`7:41: mirror.percent must be more than 0 and at most 100, got 150`,
				`7:56: size must not be negative, got "-1"`,
				`7:77: mirror.max_concurrency must be 1 to 65536, got 0`,
			}},
		{"mirror without upstream", route("        upstream: v1\n        mirror: {percent: 10}\n"),
			[]string{`7:17: mirror.upstream is required`}},
		{"sticky_cookie", route("        upstream: v1\n        sticky_cookie: {name: 'a b', ttl: -1s, path: 'x', same_site: none, secret: short}\n"),
			[]string{
				`7:31: sticky_cookie.name "a b" is not a valid cookie name`,
				`7:43: duration must not be negative, got "-1s"`,
				`7:54: sticky_cookie.path "x" must start with / and hold no ';' or control characters`,
				`7:70: sticky_cookie.same_site none needs secure: true (browsers refuse it otherwise)`,
				`7:84: sticky_cookie.secret must be at least 16 bytes long, got 5`,
			}},
		{"upstream sticky_cookie", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u}]}\nupstreams:\n  u:\n    targets: [{address: 'a:1'}]\n    sticky_cookie: {same_site: loose, secret: 0123456789abcdef, secret_file: /x}\n",
			[]string{
				`6:32: sticky_cookie.same_site "loose" is unknown (known: lax, strict, none)`,
				`6:78: sticky_cookie: set secret or secret_file, not both`,
			}},
		{"sticky_cookie secret_file", route("        upstream: v1\n        sticky_cookie: {secret_file: /no/such/secret}\n"),
			[]string{`7:38: sticky_cookie.secret_file "/no/such/secret": no such file or directory`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = "lb.yaml:" + w
			}
			checkLines(t, problemLines(t, "lb.yaml", tt.src), want)
		})
	}
}

// TestTrafficKeysDefaultsAndSecretFile checks the defaults of mirror and
// sticky_cookie, that a secret file becomes the cookie's key, and that
// Upstreams lists a split route's upstreams primary first, canary last.
func TestTrafficKeysDefaultsAndSecretFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("  0123456789abcdef-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, `listeners:
  - name: web
    listen: ':80'
    routes:
      - split: [{upstream: v2, weight: 95}, {upstream: v1, weight: 5}]
        canary: {upstream: v3, header: {X-Canary: "1"}}
        mirror: {upstream: shadow}
        sticky_cookie: {secret_file: `+secret+`}
upstreams:
  v1: {targets: [{address: 'a:1'}]}
  v2: {targets: [{address: 'b:1'}]}
  v3: {targets: [{address: 'c:1'}]}
  shadow: {targets: [{address: 'd:1'}]}
`)
	r := &cfg.Listeners[0].Routes[0]
	if got, want := r.Upstreams(), []string{"v2", "v1", "v3"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("Upstreams() = %v, want %v", got, want)
	}
	m := r.Mirror
	if m.Percent != 100 || m.MaxBody != 64*KiB || m.MaxConcurrency != 16 {
		t.Errorf("mirror defaults = %+v, want percent 100, max_body 64KiB, max_concurrency 16", *m)
	}
	s := r.StickyCookie
	if s.Name != "sb_sticky" || s.Path != "/" {
		t.Errorf("sticky_cookie defaults: name %q path %q, want sb_sticky and /", s.Name, s.Path)
	}
	if got := string(s.Key()); got != "0123456789abcdef-key" {
		t.Errorf("Key() = %q, want the file's trimmed content", got)
	}
}

// TestTrafficKeysAreForTheProxy: a client configuration's routes cannot
// split, mirror or set cookies.
func TestTrafficKeysAreForTheProxy(t *testing.T) {
	_, err := parseClient("client.yaml", []byte("upstreams:\n  u: {targets: [{address: 'a:1'}]}\n  v: {targets: [{address: 'b:1'}]}\nroutes:\n  - upstream: u\n    mirror: {upstream: v}\n"), testHost())
	if err == nil {
		t.Fatal("a client route with mirror was accepted")
	}
	want := "client.yaml:6:5: mirror is for the proxy: a call names its upstream"
	if got := err.Error(); got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}
