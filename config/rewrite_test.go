package config

import (
	"reflect"
	"testing"
)

func TestRewritesLoadWithCanonicalNamesAndRedirectDefaults(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes:
      - match: {path_prefix: /api/}
        upstream: u
        rewrite: {strip_prefix: /api, host: api.internal}
        request_headers: {set: {x-client: "{client_ip}"}, add: {via: sb}, remove: [x-debug]}
        response_headers: {set: {X-Served-By: "{endpoint}"}, remove: [server]}
      - match: {path_prefix: /old/}
        redirect: {to: "https://{host}/new{path}"}
      - match: {host: plain.example.com}
        redirect: {https: true, port: 8443}
      - redirect: {to: /elsewhere, status: 301}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	r := cfg.Listeners[0].Routes
	if got, want := r[0].RequestHeaders, (&HeaderRules{Set: map[string]string{"X-Client": "{client_ip}"}, Add: map[string]string{"Via": "sb"}, Remove: []string{"X-Debug"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("request_headers = %+v, want names canonical: %+v", got, want)
	}
	if got := r[0].ResponseHeaders.Remove; !reflect.DeepEqual(got, []string{"Server"}) {
		t.Errorf("response_headers.remove = %q, want [Server]", got)
	}
	for i, want := range []int{0, DefaultRedirectStatus, DefaultHTTPSRedirectStatus, 301} {
		if i == 0 {
			continue
		}
		if got := r[i].Redirect.Status; got != want {
			t.Errorf("route %d redirect.status = %d, want %d", i, got, want)
		}
	}
}

func TestRewriteProblemsArePlaced(t *testing.T) {
	lines := problemLines(t, "lb.yaml", `listeners:
  - name: web
    listen: :8080
    routes:
      - upstream: u
        request_headers: {set: {X-A: "{nope}", X-B: "{endpoint}", X-C: "{client_ip"}, add: {Content-Length: "1"}, remove: [Connection, "bad name"]}
      - upstream: u
        response_headers: {set: {X-A: "{header.}", x-b: "1", X-B: "2", Host: h}, remove: [x-a]}
      - upstream: u
        rewrite: {strip_prefix: api, regex: {match: "(", replace: "/x?y"}}
      - upstream: u
        rewrite: {replace_prefix: {from: /a}, host: "a b"}
      - upstream: u
        rewrite: {regex: {match: "^/u/(\\d+)$", replace: "users/$1"}, host: "::1"}
      - upstream: u
        redirect: {to: /x}
      - redirect: {to: "example.com{path}", status: 200}
      - redirect: {to: "ftp://{host}/"}
      - redirect: {https: true, to: /x}
      - redirect: {port: 8443}
        request_headers: {set: {X-A: "1"}}
        retry: {attempts: 2}
      - redirect: {to: "https://{host}/{upstream}"}
        response_headers: {set: {X-E: "{endpoint}"}}
      - redirect: {https: true, port: 70000}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	checkLines(t, lines, []string{
		`lb.yaml:6:38: request_headers.set: the value for X-A has an unknown placeholder {nope} (known: {client_ip}, {request_id}, {host}, {hostport}, {path}, {query}, {method}, {scheme}, {upstream}, {endpoint}, {header.NAME})`,
		`lb.yaml:6:53: request_headers.set: the value for X-B uses {endpoint}, which is known only once an endpoint answered: use it in response_headers`,
		`lb.yaml:6:72: request_headers.set: the value for X-C has a "{" at byte 0 that is not closed (write "{{" for a literal "{")`,
		`lb.yaml:6:93: request_headers.add: Content-Length may not be changed: it frames the message`,
		`lb.yaml:6:124: request_headers.remove: Connection may not be changed: it is hop-by-hop`,
		`lb.yaml:6:136: request_headers.remove: "bad name" is not a valid header name`,
		`lb.yaml:8:39: response_headers.set: the value for X-A has placeholder {header.}, whose header name "" is not a valid header name`,
		`lb.yaml:8:62: response_headers.set: "x-b" and "X-B" are the same header (names ignore case)`,
		`lb.yaml:8:72: response_headers.set: Host is the request's host: change it with rewrite.host`,
		`lb.yaml:8:91: response_headers.remove: x-a is also set (as "X-A"); set replaces its values already`,
		`lb.yaml:10:9: rewrite has strip_prefix and regex; use one path rewrite`,
		`lb.yaml:10:33: rewrite.strip_prefix "api" must start with "/"`,
		`lb.yaml:10:53: rewrite.regex.match "(" is not a regular expression: error parsing regexp: missing closing ): ` + "`(`",
		`lb.yaml:10:67: rewrite.regex.replace "/x?y" has '?' at byte 2; a path rewrite changes the path only (the query is kept)`,
		`lb.yaml:12:19: rewrite.replace_prefix.to is required`,
		`lb.yaml:12:53: rewrite.host "a b" is not a host name or host:port`,
		`lb.yaml:14:58: rewrite.regex.replace "users/$1" must start with "/"`,
		`lb.yaml:14:77: rewrite.host "::1" is an IPv6 address; write it in brackets`,
		`lb.yaml:15:9: a route has either upstream or redirect, not both`,
		`lb.yaml:17:24: redirect.to "example.com{path}" must be an absolute URL ("https://{host}{path}") or a path starting with "/"`,
		`lb.yaml:17:53: redirect.status 200 is not a redirect status (301, 302, 303, 307 or 308)`,
		`lb.yaml:18:24: redirect.to "ftp://{host}/" has scheme "ftp"; want http or https`,
		`lb.yaml:19:20: redirect has both to and https; use one`,
		`lb.yaml:20:9: redirect needs to (the Location, e.g. "https://{host}{path}") or https: true`,
		`lb.yaml:20:20: redirect.port is the port of an https redirect; write it into to instead`,
		`lb.yaml:21:9: request_headers has no effect on a route that redirects: it sends nothing upstream`,
		`lb.yaml:22:9: retry has no effect on a route that redirects: it sends nothing upstream`,
		`lb.yaml:23:24: redirect.to "https://{host}/{upstream}" uses {upstream}, but a route that redirects has no upstream`,
		`lb.yaml:24:39: response_headers.set: the value for X-E uses {upstream} or {endpoint}, but a route that redirects has no upstream`,
		`lb.yaml:25:39: redirect.port 70000 is out of range (1 to 65535)`,
	})
}

func TestClientRoutesRefuseTheProxysRewrites(t *testing.T) {
	_, err := ParseClient("client.yaml", []byte(`upstreams:
  orders:
    targets: [{address: "a:1"}]
routes:
  - upstream: orders
    rewrite: {strip_prefix: /x}
    request_headers: {set: {X-A: b}}
    response_headers: {remove: [Server]}
  - redirect: {to: /y}
`))
	checkLines(t, problemStrings(err), []string{
		`client.yaml:6:5: rewrite is for the proxy: a program shapes its own requests`,
		`client.yaml:7:5: request_headers is for the proxy: a program shapes its own requests`,
		`client.yaml:8:5: response_headers is for the proxy: a program shapes its own requests`,
		`client.yaml:9:5: redirect is for the proxy: a program shapes its own requests`,
	})
}
