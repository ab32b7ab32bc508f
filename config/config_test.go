package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/upstream"
)

// testEnv is the environment the tests' configurations see.
var testEnv = map[string]string{"PORT": "9001", "EMPTY": "", "TOKEN": "s3cret", "WEIGHT": "7", "TIMEOUT": "5s"}

func testHost() sys {
	return sys{
		lookupEnv: func(name string) (string, bool) { v, ok := testEnv[name]; return v, ok },
		readFile:  readSmallFile,
	}
}

// problemLines parses src and returns its problems, one string each,
// failing the test if the result breaks the Parse contract.
func problemLines(t *testing.T, file, src string) []string {
	t.Helper()
	cfg, err := parse(file, []byte(src), testHost())
	if err == nil {
		t.Fatalf("parse succeeded, want problems; config: %s", dump(cfg))
	}
	if cfg != nil {
		t.Errorf("parse returned a config together with an error")
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want Errors: %v", err, err)
	}
	lines := make([]string, len(errs))
	for i, p := range errs {
		lines[i] = p.String()
	}
	if got := strings.Join(lines, "\n"); got != err.Error() {
		t.Errorf("Error() = %q, want the problems one per line: %q", err.Error(), got)
	}
	return lines
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := parse("lb.yaml", []byte(src), testHost())
	if err != nil {
		t.Fatalf("parse: unexpected problems:\n%v", err)
	}
	return cfg
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func checkLines(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n  got:\n\t%s\n  want:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestBadFilesReportExactProblems(t *testing.T) {
	policies := strings.Join(balance.Policies(), ", ")
	tests := []struct {
		file string
		want []string
	}{
		{"unknown_key.yaml", []string{
			// The typo leaves listen unset, which is reported too.
			`2:5: listener listen address is required`,
			`3:5: unknown key "listn" in listener (known: name, protocol, listen, tls, h2c, engine, redirect_https, redirect_https_port, timeouts, max_header_bytes, max_body_bytes, access_log, trusted_proxies, routes, auto_routes, upstream, tls_passthrough, sni, connect_attempts, max_conns, max_conns_per_endpoint, queue, proxy_protocol)`,
		}},
		{"bad_duration.yaml", []string{`6:18: expected a duration like "250ms", got "fast"`}},
		{"bad_size.yaml", []string{`4:23: expected a size like "64KiB", "1MB" or 65536, got "64 kilobytes"`}},
		{"bad_address.yaml", []string{`3:13: listen address "127.0.0.1:80800" has port 80800, above 65535`}},
		{"duplicate_listen.yaml", []string{`7:13: listen address "0.0.0.0:8080" clashes with listener "web" (":8080" at line 3)`}},
		{"duplicate_listener_name.yaml", []string{`6:11: duplicate listener name "web" (first at line 2)`}},
		{"undefined_upstream.yaml", []string{`5:19: route upstream "ordrs" is not defined (defined: orders, users)`}},
		{"unknown_policy.yaml", []string{`8:23: policy: "fastest" is unknown (known: ` + policies + `)`}},
		{"bad_weight.yaml", []string{`10:17: target weight 20000 is out of range (1 to 10000)`}},
		{"duplicate_key.yaml", []string{`9:5: duplicate key "targets" (first at line 8)`}},
		{"undefined_env.yaml", []string{`3:23: environment variable SWITCHBOARD_TEST_UNDEFINED is not set (write ${SWITCHBOARD_TEST_UNDEFINED:-default} to give a default)`}},
		{"tls_missing.yaml", []string{
			`5:18: tls.cert_file "testdata/no-such-cert.pem": no such file or directory`,
			`6:17: tls.key_file "testdata/no-such-key.pem": no such file or directory`,
		}},
		{"three_mistakes.yaml", []string{
			`2:10: unknown log level "verbose" (known: debug, info, warn, error)`,
			`6:22: expected a duration like "250ms", got "5 minutes"`,
			`13:9: unknown key "wieght" in target (known: address, id, weight, zone)`,
		}},
		{"empty.yaml", []string{`1:1: empty configuration`}},
		{"not_mapping.yaml", []string{`1:1: the top level must be a mapping (keys: admin, log, shutdown_timeout, listeners, upstreams, registry, registries, discovery, tracing), got a list`}},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tt.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = path + ":" + w
			}
			checkLines(t, problemLines(t, path, string(data)), want)
		})
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no expected problems in this table", f)
		}
	}
}

func TestLoadReportsEveryProblemOfAFile(t *testing.T) {
	cfg, err := Load("testdata/bad/three_mistakes.yaml")
	if cfg != nil {
		t.Error("Load returned a config together with an error")
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("Load: got %v, want Errors with the file's 3 problems", err)
	}
	for _, p := range errs {
		if p.File != "testdata/bad/three_mistakes.yaml" {
			t.Errorf("problem %v names file %q, want the loaded path", p, p.File)
		}
	}
}

func TestLoadOfMissingFileIsNotExist(t *testing.T) {
	cfg, err := Load("testdata/no-such-file.yaml")
	if cfg != nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load = %v, %v; want nil and an error matching fs.ErrNotExist", cfg, err)
	}
}

func TestCanonicalConfigGetsItsDefaults(t *testing.T) {
	cfg, err := Load("testdata/canonical.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	s := func(d time.Duration) Duration { return Duration(d) }
	want := &Config{
		Admin:           Admin{Listen: "127.0.0.1:9901", Enabled: ptr(true)},
		Log:             Log{Level: "info", Format: "text"},
		ShutdownTimeout: s(15 * time.Second),
		Listeners: []Listener{{
			Name:           "web",
			Protocol:       "http",
			Listen:         "127.0.0.1:8080",
			Timeouts:       ListenerTimeouts{ReadHeader: s(10 * time.Second), Idle: s(60 * time.Second), ReadBody: s(30 * time.Second)},
			MaxHeaderBytes: 64 << 10,
			H2C:            ptr(true),
			Routes: []Route{{
				Name: "web/0",
				Match: Match{
					Host:       "api.example.com",
					PathPrefix: "/orders",
					Methods:    []string{"GET"},
					Headers:    map[string]string{"X-Env": "canary"},
				},
				Upstream: "orders",
				Timeout:  ptr(s(60 * time.Second)),
			}},
		}},
		Upstreams: map[string]*Upstream{"orders": {
			Config: upstream.Config{
				Balance: balance.Config{Policy: "round_robin"},
				Targets: []endpoint.Spec{
					{Address: "127.0.0.1:9001", Weight: 3},
					{Address: "127.0.0.1:9002", Weight: 1},
				},
				Health: upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 3, FailureStatuses: []int{}, BaseEjection: 10 * time.Second}},
			},
			Protocol:               "http1",
			Timeouts:               UpstreamTimeouts{Connect: s(2 * time.Second), ResponseHeader: s(30 * time.Second)},
			MaxIdlePerEndpoint:     ptr(64),
			IdleTimeout:            s(60 * time.Second),
			MaxResponseHeaderBytes: 64 << 10,
		}},
		Discovery: Discovery{EmptyGrace: s(30 * time.Second)},
		File:      "testdata/canonical.yaml",
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("canonical config:\n got %s\nwant %s", dump(cfg), dump(want))
	}
}

func TestDefaultsKeepExplicitZeroWherePointersAllowIt(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes:
      - {upstream: u, timeout: 0s}
      - {upstream: u, name: streams}
upstreams:
  u:
    max_idle_per_endpoint: 0
    targets: [{address: "a:1", weight: 0}]
    health: {active: {jitter: 0}}
  v:
    targets: [{address: "a:1"}]
    health: {active: {}}
`)
	routes := cfg.Listeners[0].Routes
	if got := *routes[0].Timeout; got != 0 {
		t.Errorf("route timeout: 0s became %v, want it kept (0 disables the timeout)", got)
	}
	if got := *routes[1].Timeout; got != DefaultRouteTimeout {
		t.Errorf("absent route timeout = %v, want %v", got, DefaultRouteTimeout)
	}
	if routes[1].Name != "streams" || routes[0].Name != "web/0" {
		t.Errorf("route names = %q, %q; want web/0 (default) and streams", routes[0].Name, routes[1].Name)
	}
	u := cfg.Upstreams["u"]
	if *u.MaxIdlePerEndpoint != 0 {
		t.Errorf("max_idle_per_endpoint: 0 became %d, want 0 kept", *u.MaxIdlePerEndpoint)
	}
	if u.Targets[0].Weight != 1 {
		t.Errorf("weight 0 = %d after defaults, want 1", u.Targets[0].Weight)
	}
	if j := u.Health.Active.Jitter; j == nil || *j != 0 {
		t.Errorf("jitter: 0 = %v, want an explicit 0 (no jitter)", j)
	}
	if j := cfg.Upstreams["v"].Health.Active.Jitter; j != nil {
		t.Errorf("absent jitter = %v, want nil: the health package's default", *j)
	}
}

func TestInlineProblems(t *testing.T) {
	const upstreams = "\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
	const listener = "listeners:\n  - name: web\n    listen: :8080\n    routes: [{upstream: u}]\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"wrong kind for a list", "listeners: {name: web}\n",
			[]string{`1:12: expected a list, got a mapping`}},
		{"wrong kind for a mapping", "admin: 127.0.0.1:9901\n",
			[]string{`1:8: expected a mapping, got "127.0.0.1:9901"`}},
		{"wrong kind for a string", "admin: {listen: [a]}\n",
			[]string{`1:17: expected a string, got a list`}},
		{"bool", "admin: {enabled: yes}\n",
			[]string{`1:18: expected true or false, got "yes"`}},
		{"integer", listener + "upstreams:\n  u: {targets: [{address: 'a:1', weight: heavy}]}\n",
			[]string{`6:42: expected an integer, got "heavy"`}},
		{"integer out of range", listener + "upstreams:\n  u: {targets: [{address: 'a:1'}], max_idle_per_endpoint: 99999999999999999999}\n",
			[]string{`6:59: integer 99999999999999999999 is out of range`}},
		{"consistent_hash without hash_key", listener + "upstreams:\n  u:\n    balance: {policy: consistent_hash}\n    targets: [{address: 'a:1'}]\n",
			[]string{`7:5: hash_key: required by consistent_hash (header:NAME, cookie:NAME, client_ip, path or query:NAME)`}},
		{"bad hash_key", listener + "upstreams:\n  u:\n    balance: {policy: maglev, hash_key: 'body:x'}\n    targets: [{address: 'a:1'}]\n",
			[]string{`7:41: hash_key: "body:x" is unknown: want header:NAME, cookie:NAME, client_ip, path or query:NAME`}},
		{"key the policy does not read", listener + "upstreams:\n  u:\n    balance: {policy: round_robin, bounded_load: 1.25}\n    targets: [{address: 'a:1'}]\n",
			[]string{`7:50: bounded_load: not used by round_robin`}},
		{"float", listener + "upstreams:\n  u:\n    balance: {policy: maglev, hash_key: path, bounded_load: lots}\n    targets: [{address: 'a:1'}]\n",
			[]string{`7:61: expected a number, got "lots"`}},
		{"rate limit problems", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        rate_limit:\n          - {rate: 0/s, burst: 0}\n          - {rate: 5/s, burst: 1, key: 'cookie:x'}\n" + upstreams,
			[]string{
				`7:20: rate: must be N/UNIT like 100/s, got "0/s": N must be at least 1`,
				`7:32: burst: must be at least 1, got 0`,
				`8:40: key: "cookie:x" is unknown: want client_ip, header:NAME, path or route`,
			}},
		{"global limit without redis", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        rate_limit: [{rate: 5/s, burst: 1, global: {local_share: 0.5}}]\n" + upstreams,
			[]string{`6:44: global.redis (host:port of the Redis server) is required`}},
		{"global limit problems", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        rate_limit:\n          - {rate: 5/s, burst: 1, global: {redis: 'r:1', on_failure: sometimes}}\n          - {algorithm: leaky_bucket, rate: 5/s, queue: 1, global: {redis: ':1', local_share: 2}}\n          - {rate: 5/s, brust: 1}\n" + upstreams,
			[]string{
				`7:70: global.on_failure: "sometimes" is unknown (known: fail_open, fail_closed)`,
				`8:25: algorithm: a global limit is a token bucket; "leaky_bucket" cannot be global`,
				`8:76: global.redis ":1" needs a host`,
				`8:95: global.local_share: must be more than 0 and at most 1, got 2`,
				`9:13: burst: must be at least 1, got 0`,
				`9:25: unknown key "brust" in a rate_limit entry (known: name, algorithm, rate, burst, queue, max_wait, variant, key, trusted_proxies, max_keys, global)`,
			}},
		{"concurrency", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        concurrency: {max_in_flight: 0}\n" + upstreams,
			[]string{`6:38: max_in_flight: must be at least 1, got 0`}},
		{"health problems", listener + "upstreams:\n  u:\n    targets: [{address: 'a:1'}]\n    health:\n      active: {type: smoke, interval: -1s}\n      passive: {consecutive_failures: -1}\n      panic_threshold: 1.5\n",
			[]string{
				`9:22: active.type: unknown check type "smoke" (want "http", "tcp" or "grpc")`,
				`9:39: duration must not be negative, got "-1s"`,
				`10:39: passive.consecutive_failures: must be at least 1, got -1`,
				`11:24: panic_threshold: must be between 0 and 1, got 1.5`,
			}},
		{"health fast interval and max_interval without adaptive", listener + "upstreams:\n  u:\n    targets: [{address: 'a:1'}]\n    health:\n      active: {interval: 200ms, timeout: 100ms}\n  v:\n    targets: [{address: 'a:1'}]\n    health:\n      active: {interval: 200ms, allow_fast: true, timeout: 100ms, adaptive: false, max_interval: 1s}\n",
			[]string{
				`9:26: active.interval: 200ms is under 1s: probing this often needs allow_fast: true`,
				`13:98: active.max_interval: 1s is set but adaptive is false (the interval never stretches)`,
			}},
		{"health rise 0", listener + "upstreams:\n  u:\n    targets: [{address: 'a:1'}]\n    health: {active: {rise: 0, fall: 0}}\n",
			[]string{`8:29: rise: must be at least 1, got 0`, `8:38: fall: must be at least 1, got 0`}},
		{"breaker and fallback", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        breaker: {failure_rate: 1.5}\n        fallback: {steps: [{type: backup, upstream: nope}]}\n" + upstreams,
			[]string{
				`6:33: failure_rate: must be between 0 and 1, got 1.5`,
				`7:53: steps[0].upstream: backup upstream "nope" is not defined`,
			}},
		{"retry problems", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        retry: {attempts: 0, budget_percent: -1}\n" + upstreams,
			[]string{
				`6:46: budget_percent: must be between 0 and 100 (20 = one retry per five requests), got -1`,
			}},
		{"a problem in a list is placed at its element", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        retry: {retry_on: [reset, sometimes]}\n        rate_limit: [{rate: 5/s, burst: 1, key: client_ip, trusted_proxies: [10.0.0.0/8, x]}]\n" + upstreams,
			[]string{
				`6:35: retry_on[1]: "sometimes" is not a retry condition (known: connect_failure, reset, timeout)`,
				`7:90: trusted_proxies[1]: "x" is not an IP address or CIDR prefix`,
			}},
		{"a missing key is placed at the mapping that lacks it", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        fallback:\n          steps:\n            - {type: backup, upstream: u}\n            - {type: stale}\n" + upstreams,
			[]string{`9:15: steps[1].max_age: a stale step needs a positive duration, got 0s`}},
		{"bad hedge", "listeners:\n  - name: web\n    listen: :8080\n    routes:\n      - upstream: u\n        retry: {hedge_after: soon}\n" + upstreams,
			[]string{`6:30: hedge_after: must be a positive duration like "50ms" or "p95", got "soon"`}},
		{"negative duration", "shutdown_timeout: -5s\n",
			[]string{`1:19: duration must not be negative, got "-5s"`}},
		{"duration without unit", "shutdown_timeout: 30\n",
			[]string{`1:19: expected a duration like "250ms", got "30" (add a unit: 30s)`}},
		{"negative size", "listeners:\n  - {name: web, listen: ':80', max_body_bytes: -1, routes: [{upstream: u}]}" + upstreams,
			[]string{`2:48: size must not be negative, got "-1"`}},
		{"unknown top-level key", "registri: {}\n",
			[]string{`1:1: unknown key "registri" at the top level (known: admin, log, shutdown_timeout, listeners, upstreams, registry, registries, discovery, tracing)`}},
		// Registries and discovery (issues 7 and 8).
		{"unknown registry kind", "registries:\n  r1: {kind: zookeeper}\n",
			[]string{`2:14: unknown registry kind "zookeeper" (known: consul, etcd, dns, static)`}},
		{"registry address does not parse", "registries:\n  r1: {kind: consul, address: 'localhost:port'}\n",
			[]string{`2:31: registry address "localhost:port" has a non-numeric port "port"`}},
		{"consul tls over http", "registries:\n  r1: {kind: consul, address: 'http://c:8500', tls: {insecure_skip_verify: true}}\n",
			[]string{`2:31: registry address "http://c:8500" says http but tls is set: use https://`}},
		{"etcd address scheme", "registries:\n  r1: {kind: etcd, address: 'ftp://x:1'}\n",
			[]string{`2:29: registry address "ftp://x:1" is not host:port or http(s)://host:port`}},
		{"key of another kind", "registries:\n  r1: {kind: dns, prefix: /x}\n",
			[]string{`2:19: prefix is not a key of a dns registry (its keys: address, record, port, min_ttl, max_ttl)`}},
		{"discovery names an unknown registry", "upstreams:\n  u: {discovery: {registry: nope, service: orders}}\n",
			[]string{`2:29: discovery.registry "nope" is not defined (no registries are defined: add a registries entry or the registry block)`}},
		{"embedded without registry block", "upstreams:\n  u: {discovery: {registry: embedded, service: orders}}\n",
			[]string{`2:29: discovery.registry "embedded" needs the embedded registry: add a top-level registry block`}},
		{"targets and discovery", "registry: {}\nupstreams:\n  u:\n    targets: [{address: 'a:1'}]\n    discovery: {registry: embedded, service: s}\n",
			[]string{`4:14: upstream "u" has both targets and discovery; use one`}},
		{"registry not loopback without token", "registry: {listen: '0.0.0.0:8500'}\n",
			[]string{`1:20: registry.listen "0.0.0.0:8500" is not loopback: set registry.acl_token (or acl_token_file) so that writes need it, or insecure: true to accept anyone's writes`}},
		{"registry node name", "registry: {node_name: '..'}\n",
			[]string{`1:23: registry.node_name: ".." is not a usable name`}},
		{"registry state budget too small", "registry: {max_state_bytes: 64}\n",
			[]string{`1:29: registry.max_state_bytes 64 is outside 64KiB to 1GiB (the default is 64MiB)`}},
		{"registry state budget too large", "registry: {max_state_bytes: 2GiB}\n",
			[]string{`1:29: registry.max_state_bytes 2GiB is outside 64KiB to 1GiB (the default is 64MiB)`}},
		{"registry state budget zero", "registry: {max_state_bytes: 0}\n",
			[]string{`1:29: registry.max_state_bytes 0 is outside 64KiB to 1GiB (the default is 64MiB)`}},
		{"registry state budget negative", "registry: {max_state_bytes: -1MiB}\n",
			[]string{`1:29: size must not be negative, got "-1MiB"`}},
		{"registry clashes with admin", "admin: {listen: '127.0.0.1:9000'}\nregistry: {listen: '127.0.0.1:9000'}\n",
			[]string{`2:20: registry.listen ("127.0.0.1:9000" at line 2) clashes with admin.listen ("127.0.0.1:9000" at line 1)`}},
		{"auto_routes without registry", "listeners:\n  - {name: web, listen: ':80', auto_routes: true}\n",
			[]string{`2:45: auto_routes reads the embedded registry: add a top-level registry block`}},
		// TCP listeners (issue 9).
		{"routes on a tcp listener", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432', upstream: u, routes: [{upstream: u}]}" + upstreams,
			[]string{`2:61: routes is for http listeners; a tcp listener forwards connections to its upstream`}},
		{"sni without passthrough", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432', upstream: u, sni: [{names: [a.example.com], upstream: u}]}" + upstreams,
			[]string{`2:61: sni routes need tls_passthrough: true: this tcp listener does not read the TLS ClientHello`}},
		{"sni on an http listener", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u}], sni: [{names: [a.b], upstream: u}]}" + upstreams,
			[]string{`2:57: sni is for tcp listeners with tls_passthrough: true; an http listener routes by match.host`}},
		{"tcp unknown upstream", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432', upstream: nope}" + upstreams,
			[]string{`2:58: upstream "nope" is not defined (defined: u)`}},
		{"bad sni name", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432', tls_passthrough: true, sni: [{names: ['a.*.com'], upstream: u}]}" + upstreams,
			[]string{`2:86: sni name "a.*.com": "*" may only be a whole first label, as in "*.example.com"`}},
		{"proxy protocol accept without trust", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432', upstream: u, proxy_protocol: {accept: true, send: v3}}" + upstreams,
			[]string{`2:61: proxy_protocol.accept needs trusted_proxies: headers are believed only from them`, `2:98: proxy_protocol.send "v3": use v1 or v2`}},
		{"duplicate key in a map", listener + "upstreams:\n  u: {targets: [{address: 'a:1'}]}\n  u: {targets: [{address: 'a:2'}]}\n",
			[]string{`7:3: duplicate key "u" (first at line 6)`}},
		{"a bad value is not echoed as missing", "listeners:\n  - {name: web, listen: [x], routes: [{upstream: u}]}" + upstreams,
			[]string{`2:25: expected a string, got a list`}},
		{"admin not loopback", "admin: {listen: '0.0.0.0:9901'}\n",
			[]string{`1:17: admin.listen is not loopback; set admin.token so that writes require it`}},
		{"admin empty listen", "admin: {listen: ''}\n",
			[]string{`1:17: admin.listen must not be empty; to turn the admin API off, set admin.enabled: false`}},
		{"admin bad listen", "admin: {listen: '9901'}\n",
			[]string{`1:17: admin.listen "9901" is not host:port (missing port in address)`}},
		{"log format", "log: {format: xml}\n",
			[]string{`1:15: unknown log format "xml" (known: text, json)`}},
		{"listener without name", "listeners:\n  - {listen: ':80', routes: [{upstream: u}]}" + upstreams,
			[]string{`2:5: listener name is required`}},
		{"tcp without upstream", "listeners:\n  - {name: db, protocol: tcp, listen: ':5432'}\n",
			[]string{`2:5: tcp listener "db" needs an upstream (or sni routes)`}},
		{"unknown protocol", "listeners:\n  - {name: db, protocol: udp, listen: ':53'}\n",
			[]string{`2:26: unknown protocol "udp" (supported: http, tcp)`}},
		{"no routes", "listeners:\n  - {name: web, listen: ':80'}\n",
			[]string{`2:5: listener "web" has no routes`}},
		{"non-numeric port", "listeners:\n  - {name: web, listen: 'localhost:http', routes: [{upstream: u}]}" + upstreams,
			[]string{`2:25: listen address "localhost:http" has a non-numeric port "http"`}},
		{"bad listen host", "listeners:\n  - {name: web, listen: 'a b:80', routes: [{upstream: u}]}" + upstreams,
			[]string{`2:25: listen address "a b:80" has an invalid host "a b"`}},
		{"clash with admin default", "listeners:\n  - {name: web, listen: ':9901', routes: [{upstream: u}]}" + upstreams,
			[]string{`2:25: listen address ":9901" clashes with the admin API's default address 127.0.0.1:9901 (set admin.listen to move it)`}},
		{"route without upstream", "listeners:\n  - {name: web, listen: ':80', routes: [{name: r}]}\n",
			[]string{`2:41: route upstream (or split) is required`}},
		{"no upstreams defined", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u}]}\n",
			[]string{`2:52: route upstream "u" is not defined (no upstreams are defined)`}},
		{"duplicate route name", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u, name: r}]}\n  - {name: api, listen: ':81', routes: [{upstream: u, name: r}]}" + upstreams,
			[]string{`3:61: duplicate route name "r" (first at line 2)`}},
		{"explicit name takes a default one", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u, name: web/1}, {upstream: u}]}" + upstreams,
			[]string{`2:69: route 1 of listener "web" gets the default name "web/1", which the route at line 2 already has; rename one of them`}},
		{"match", "listeners:\n  - name: web\n    listen: ':80'\n    routes:\n      - upstream: u\n        match:\n          path_prefix: api\n          methods: [get, 'PO ST']\n          headers: {x-env: a, X-Env: b, 'bad name': c}\n          host: 'a.*.com'\n" + upstreams,
			[]string{
				`7:24: match.path_prefix "api" must start with "/"`,
				`8:26: match.methods: "PO ST" is not a valid HTTP method`,
				`9:31: match.headers: "x-env" and "X-Env" are the same header (names ignore case)`,
				`9:41: match.headers: "bad name" is not a valid header name`,
				`10:17: match.host "a.*.com": "*" may only start a host, as in "*.example.com"`,
			}},
		{"match host with port", "listeners:\n  - {name: web, listen: ':80', routes: [{upstream: u, match: {host: 'a.com:80'}}]}" + upstreams,
			[]string{`2:69: match.host "a.com:80" is not a host name (leave out any port)`}},
		{"upstream checks", listener + "upstreams:\n  u:\n    protocol: http2\n    max_idle_per_endpoint: -1\n    targets:\n      - {address: '9001'}\n      - {address: ':9001'}\n      - {address: 'b:0'}\n      - {address: 'a:1', weight: -2}\n      - {address: 'A:1'}\n  'bad name': {targets: [{address: 'a:1'}]}\n  empty:\n",
			[]string{
				`7:15: unknown upstream protocol "http2" (known: http1, h2c, https)`,
				`8:28: max_idle_per_endpoint must not be negative, got -1`,
				`10:19: target address "9001" is not host:port (missing port in address)`,
				`11:19: target address ":9001" needs a host`,
				`12:19: target address "b:0" has port 0, outside 1-65535`,
				`13:34: target weight -2 is out of range (1 to 10000)`,
				`14:19: duplicate target address "A:1" in upstream "u" (first at line 13)`,
				`15:3: upstream name "bad name" may contain only letters, digits, "_", "." and "-"`,
				`16:3: upstream "empty" has no targets (or discovery)`,
			}},
		{"a dynamic_weight factor's problem is at its entry", listener + "upstreams:\n  u:\n    balance:\n      policy: dynamic_weight\n      dynamic_weight:\n        factors:\n          inventory: {coefficient: 1}\n          queue_depth: {max: 100}\n    targets: [{address: 'a:1'}]\n",
			[]string{`12:11: dynamic_weight.factors.queue_depth.coefficient: must be > 0, got 0`}},
		{"duplicate target id", listener + "upstreams:\n  u:\n    targets:\n      - {address: 'a:1', id: n1}\n      - {address: 'b:1', id: n1}\n",
			[]string{`9:30: duplicate target id "n1" in upstream "u" (first at line 8)`}},
		{"meta is not a key of a target", listener + "upstreams:\n  u: {targets: [{address: 'a:1', meta: {a: b}}]}\n",
			[]string{`6:34: unknown key "meta" in target (known: address, id, weight, zone)`}},
		{"second document", listener + upstreams + "---\nlisteners: []\n",
			[]string{`8:1: a second YAML document; a configuration file holds one`}},
		{"syntax error", "listeners:\n  - name: web\n   listen: ':80'\n",
			[]string{`2:3: invalid YAML: did not find expected '-' indicator`}},
		{"scanner error", "listeners:\n  - name: web\n    listen: a: b\n",
			[]string{`3:5: invalid YAML: mapping values are not allowed in this context`}},
		{"unknown anchor", "admin: *base\n",
			[]string{`1:8: invalid YAML: unknown anchor 'base' referenced`}},
		{"null top level", "~\n", []string{`1:1: empty configuration`}},
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

// TestBalanceErrorsPointAtTheKey is the regression test for balance
// problems, which were reported at the balance key however deep the setting
// at fault: each now points at the line and column of the offending value,
// and a missing one at the mapping that lacks it.
func TestBalanceErrorsPointAtTheKey(t *testing.T) {
	const src = `listeners:
  - name: web
    listen: :8080
    routes: [{upstream: a}, {upstream: b}, {upstream: c}]
upstreams:
  a:
    balance: {policy: consistent_hash, hash_key: "bogus"}
    targets: [{address: "a:1"}]
  b:
    balance:
      policy: dynamic_weight
      dynamic_weight: {cpu: -1, mem: 0.5}
    targets: [{address: "b:1"}]
  c:
    balance:
      policy: dynamic_weight
      dynamic_weight:
        poll_interval: 2s
    targets: [{address: "c:1"}]
`
	checkLines(t, problemLines(t, "lb.yaml", src), []string{
		`lb.yaml:7:50: hash_key: "bogus" is unknown: want header:NAME, cookie:NAME, client_ip, path or query:NAME`,
		`lb.yaml:12:29: dynamic_weight.cpu: must be >= 0, got -1`,
		`lb.yaml:18:24: dynamic_weight.poll_interval: needs poll_path`,
	})
}

func TestListenAddressClashes(t *testing.T) {
	tests := []struct {
		a, b  string
		clash bool
	}{
		{":8080", "0.0.0.0:8080", true},
		{":8080", "127.0.0.1:8080", true},
		{"[::]:8080", "10.0.0.1:8080", true},
		{"localhost:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{"[::1]:8080", "127.0.0.1:8080", false},
		{"Example.com:80", "example.com:80", true},
		{"127.0.0.1:0", "127.0.0.1:0", false}, // each gets a free port
		{":0", "127.0.0.1:0", false},
	}
	for _, tt := range tests {
		src := "listeners:\n  - {name: a, listen: '" + tt.a + "', routes: [{upstream: u}]}\n  - {name: b, listen: '" + tt.b + "', routes: [{upstream: u}]}\nupstreams: {u: {targets: [{address: 'x:1'}]}}\n"
		_, err := parse("lb.yaml", []byte(src), testHost())
		if got := err != nil && strings.Contains(err.Error(), "clashes"); got != tt.clash {
			t.Errorf("%s and %s: clash = %v, want %v (error: %v)", tt.a, tt.b, got, tt.clash, err)
		}
	}
}

func TestAdminTokenRequiredOffLoopback(t *testing.T) {
	tests := []struct {
		admin string
		ok    bool
	}{
		{"{listen: '127.0.0.1:9901'}", true},
		{"{listen: '127.1.2.3:9901'}", true},
		{"{listen: '[::1]:9901'}", true},
		{"{listen: 'localhost:9901'}", true},
		{"{listen: ':9901'}", false},
		{"{listen: '10.0.0.1:9901'}", false},
		{"{listen: 'admin.internal:9901'}", false},
		{"{listen: ':9901', token: s3cret}", true},
		{"{listen: ':9901', enabled: false}", true},
	}
	for _, tt := range tests {
		_, err := parse("lb.yaml", []byte("admin: "+tt.admin+"\n"), testHost())
		if (err == nil) != tt.ok {
			t.Errorf("admin: %s: error = %v, want ok = %v", tt.admin, err, tt.ok)
		}
	}
}

func TestMatchIsNormalized(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes:
      - upstream: u
        match: {methods: [get, Post], headers: {x-request-id: abc, content-TYPE: json}}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	m := cfg.Listeners[0].Routes[0].Match
	if want := []string{"GET", "POST"}; !slices.Equal(m.Methods, want) {
		t.Errorf("methods = %q, want %q", m.Methods, want)
	}
	if want := map[string]string{"X-Request-Id": "abc", "Content-Type": "json"}; !reflect.DeepEqual(m.Headers, want) {
		t.Errorf("headers = %v, want canonical names %v", m.Headers, want)
	}
	if m.PathPrefix != "/" {
		t.Errorf("path_prefix = %q, want the default /", m.PathPrefix)
	}
}

func TestEnvExpansionInValues(t *testing.T) {
	t.Setenv("SB_TEST_PORT", "9001")
	t.Setenv("SB_TEST_WEIGHT", "5")
	t.Setenv("SB_TEST_TIMEOUT", "3s")
	cfg, err := Parse("lb.yaml", []byte(`
admin: {token: "$${literal}", listen: "${SB_TEST_ADMIN:-127.0.0.1:9902}"}
listeners:
  - name: web
    listen: 127.0.0.1:8080
    routes: [{upstream: u, timeout: "${SB_TEST_TIMEOUT}"}]
upstreams:
  u: {targets: [{address: "127.0.0.1:${SB_TEST_PORT}", weight: "${SB_TEST_WEIGHT}"}]}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := cfg.Admin.Token; got != "${literal}" {
		t.Errorf("token = %q, want $$ to escape a dollar", got)
	}
	if got := cfg.Admin.Listen; got != "127.0.0.1:9902" {
		t.Errorf("admin listen = %q, want the default from ${...:-...}", got)
	}
	tg := cfg.Upstreams["u"].Targets[0]
	if tg.Address != "127.0.0.1:9001" || tg.Weight != 5 {
		t.Errorf("target = %+v, want address and weight from the environment", tg)
	}
	if got := *cfg.Listeners[0].Routes[0].Timeout; got != Duration(3*time.Second) {
		t.Errorf("timeout = %v, want 3s from the environment", got)
	}
}

func TestEnvProblemsPointAtTheReference(t *testing.T) {
	src := "admin:\n  token: |\n    x ${NOPE}\n    ${ALSO_NOPE} ${TOKEN} ${}\n  listen: \"é ${X\"\n"
	checkLines(t, problemLines(t, "lb.yaml", src), []string{
		`lb.yaml:3:7: environment variable NOPE is not set (write ${NOPE:-default} to give a default)`,
		`lb.yaml:4:5: environment variable ALSO_NOPE is not set (write ${ALSO_NOPE:-default} to give a default)`,
		`lb.yaml:4:27: invalid environment variable name "" in "${}"`,
		`lb.yaml:5:14: "${" without a closing "}"`,
	})
}

func TestExpand(t *testing.T) {
	lookup := func(name string) (string, bool) { v, ok := testEnv[name]; return v, ok }
	tests := []struct {
		in, want string
		errRefs  []int
	}{
		{"plain", "plain", nil},
		{"${PORT}", "9001", nil},
		{"a:${PORT}/x", "a:9001/x", nil},
		{"$$", "$", nil},
		{"$${PORT}", "${PORT}", nil},
		{"$$$${PORT}", "$${PORT}", nil},
		{"$PORT and a$ and $", "$PORT and a$ and $", nil},
		{"${UNSET:-dflt}", "dflt", nil},
		{"${EMPTY:-dflt}", "dflt", nil},
		{"${EMPTY}", "", nil},
		{"${PORT:-dflt}", "9001", nil},
		{"${UNSET:-}", "", nil},
		{"${UNSET:-a:-b}", "a:-b", nil},
		{"${PORT}${UNSET}${UNSET2}", "9001", []int{1, 2}},
		{"${1X}", "", []int{0}},
		{"${PORT", "${PORT", []int{0}},
	}
	for _, tt := range tests {
		got, errs := expand(tt.in, lookup)
		var refs []int
		for _, e := range errs {
			refs = append(refs, e.ref)
		}
		if got != tt.want || !slices.Equal(refs, tt.errRefs) {
			t.Errorf("expand(%q) = %q with problems at refs %v; want %q, %v", tt.in, got, refs, tt.want, tt.errRefs)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  string
	}{
		{"0", 0, ""},
		{"512", 512, ""},
		{"64KiB", 64 << 10, ""},
		{"1MiB", 1 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"10KB", 10000, ""},
		{"1MB", 1000000, ""},
		{"1GB", 1000000000, ""},
		{"64 KiB", 64 << 10, ""},
		{"64kib", 64 << 10, ""},
		{"100B", 100, ""},
		{"lots", 0, `expected a size like "64KiB", "1MB" or 65536, got "lots"`},
		{"1.5MiB", 0, `expected a size like "64KiB", "1MB" or 65536, got "1.5MiB"`},
		{"10XB", 0, `expected a size like "64KiB", "1MB" or 65536, got "10XB"`},
		{"KiB", 0, `expected a size like "64KiB", "1MB" or 65536, got "KiB"`},
		{"-1", 0, `size must not be negative, got "-1"`},
		{"-1KiB", 0, `size must not be negative, got "-1KiB"`},
		{"9999999999999GiB", 0, `size "9999999999999GiB" is too large`},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.err {
			t.Errorf("parseSize(%q) = %d, %q; want %d, %q", tt.in, got, gotErr, tt.want, tt.err)
		}
	}
}

func TestSizeString(t *testing.T) {
	for s, want := range map[Size]string{0: "0", 100: "100", 64 << 10: "64KiB", 3 << 20: "3MiB", 1 << 30: "1GiB", 1000: "1000"} {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(s), got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want Duration
		err  string
	}{
		{"250ms", Duration(250 * time.Millisecond), ""},
		{"1m30s", Duration(90 * time.Second), ""},
		{"0", 0, ""},
		{"fast", 0, `expected a duration like "250ms", got "fast"`},
		{"-1s", 0, `duration must not be negative, got "-1s"`},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.err {
			t.Errorf("parseDuration(%q) = %v, %q; want %v, %q", tt.in, got, gotErr, tt.want, tt.err)
		}
	}
}

func TestMergeKeysAndAliases(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes: [{upstream: a}, {upstream: b}]
upstreams:
  a: &common
    protocol: h2c
    idle_timeout: 10s
    targets: [{address: "a:1"}]
  b:
    <<: *common
    idle_timeout: 20s
    targets: [{address: "b:1"}]
`)
	b := cfg.Upstreams["b"]
	if b.Protocol != "h2c" || b.IdleTimeout != Duration(20*time.Second) || b.Targets[0].Address != "b:1" {
		t.Errorf("merged upstream = %s; want protocol from the merge and its own idle_timeout and targets", dump(b))
	}
}

func TestAliasExpansionIsBounded(t *testing.T) {
	repeat := func(s string, n int) string {
		return strings.TrimSuffix(strings.Repeat(s+", ", n), ", ")
	}
	// Each is a few KiB that would expand to a billion values.
	var merges strings.Builder
	merges.WriteString("upstreams: {u: {targets: [{address: 'a:1'}]}}\nanchors:\n  - &m0 {upstream: u}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&merges, "  - &m%d {<<: [%s]}\n", i, repeat(fmt.Sprintf("*m%d", i-1), 10))
	}
	merges.WriteString("listeners: [{name: web, listen: ':80', routes: [*m9]}]\n")
	lists := "upstreams: {u: {targets: [{address: 'a:1'}]}}\n" +
		"anchors:\n" +
		"  - &methods [" + repeat("GET", 1000) + "]\n" +
		"  - &route {upstream: u, match: {methods: *methods}}\n" +
		"  - &routes [" + repeat("*route", 1000) + "]\n" +
		"  - &listener {name: web, listen: ':80', routes: *routes}\n" +
		"listeners: [" + repeat("*listener", 1000) + "]\n"

	for name, src := range map[string]string{"merges": merges.String(), "lists": lists} {
		t.Run(name, func(t *testing.T) {
			lines := problemLines(t, "lb.yaml", src)
			found := false
			for _, l := range lines {
				found = found || strings.Contains(l, "too many values")
			}
			if !found {
				t.Errorf("problems do not mention the limit on values:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

func TestProblemsAreSortedByPosition(t *testing.T) {
	ps := &problems{file: "f"}
	ps.at(3, 1, "c")
	ps.at(1, 9, "b")
	ps.at(1, 2, "a")
	ps.at(1, 2, "a") // reported twice, kept once
	got := ps.errors().Error()
	if want := "f:1:2: a\nf:1:9: b\nf:3:1: c"; got != want {
		t.Errorf("Errors = %q, want %q", got, want)
	}
}

func TestUnexportedAndIgnoredFieldsAreNotKeys(t *testing.T) {
	lines := problemLines(t, "lb.yaml", "file: x.yaml\n")
	if !strings.Contains(lines[0], `unknown key "file"`) {
		t.Errorf("File (yaml:\"-\") accepted as a key: %v", lines)
	}
}

func TestParsePath(t *testing.T) {
	for path, want := range map[string]string{
		"":                         "",
		"burst":                    "burst",
		"steps[1].status":          "steps [1] status",
		"global.timeout":           "global timeout",
		"trusted_proxies[0]":       "trusted_proxies [0]",
		"a[1][2].b":                "a [1] [2] b",
		".a":                       "invalid",
		"a.":                       "invalid",
		"a..b":                     "invalid",
		"a.[1]":                    "invalid",
		"a[x]":                     "invalid",
		"a[1":                      "invalid",
		"dynamic_weight.poll_path": "dynamic_weight poll_path",
	} {
		steps, ok := parsePath(path)
		got := "invalid"
		if ok {
			var parts []string
			for _, s := range steps {
				if s.name != "" {
					parts = append(parts, s.name)
				} else {
					parts = append(parts, fmt.Sprintf("[%d]", s.index))
				}
			}
			got = strings.Join(parts, " ")
		}
		if got != want {
			t.Errorf("parsePath(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestInlineStructKeysAreTheParentsKeys(t *testing.T) {
	type Inner struct {
		Rate  string `yaml:"rate"`
		Burst int    `yaml:"burst"`
	}
	type entry struct {
		Name  string `yaml:"name"`
		Inner `yaml:",inline"`
		Extra bool `yaml:"extra"`
	}
	decode := func(src string) (*entry, *positions, []string) {
		probs := &problems{file: "f"}
		root := parseYAML([]byte(src), probs)
		pos := newPositions(root)
		e := &entry{}
		d := &decoder{src: []byte(src), lookup: func(string) (string, bool) { return "", false }, pos: pos, probs: probs}
		d.decode(root, reflect.ValueOf(e).Elem(), &site{value: root})
		var lines []string
		for _, p := range probs.errors() {
			lines = append(lines, p.String())
		}
		return e, pos, lines
	}
	e, pos, lines := decode("name: a\nrate: 5/s\nburst: 3\n")
	if len(lines) > 0 || e.Name != "a" || e.Rate != "5/s" || e.Burst != 3 {
		t.Fatalf("decoded %+v with problems %v, want the inline keys set", e, lines)
	}
	if n := pos.of(&e.Burst).node(); n.Line != 3 {
		t.Errorf("burst recorded at line %d, want 3", n.Line)
	}
	if n := pos.of(&e.Inner).node(); n.Line != 1 {
		t.Errorf("the inline struct is recorded at line %d, want its parent's mapping (line 1)", n.Line)
	}
	chain, exact := locate(e, "burst")
	if !exact || chain[len(chain)-1] != any(&e.Burst) {
		t.Errorf("locate(burst) = %v, %v; want &e.Burst through the inline struct", chain, exact)
	}
	_, _, lines = decode("name: a\nbrust: 3\n")
	if want := []string{`f:2:1: unknown key "brust" in entry (known: name, rate, burst, extra)`}; !slices.Equal(lines, want) {
		t.Errorf("problems %q, want %q", lines, want)
	}
}

// TestKeysAreUniquePerMapping guards inline structs: a key of an inline
// library config must not also be a key of the struct that holds it.
func TestKeysAreUniquePerMapping(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		names := map[string]bool{}
		for _, f := range fieldsOf(ty) {
			if names[f.name] {
				t.Errorf("%s has the key %q twice", ty, f.name)
			}
			names[f.name] = true
			walk(ty.FieldByIndex(f.index).Type)
		}
	}
	walk(reflect.TypeFor[Config]())
}

// TestUnknownKeysNameTheirPlace: a struct from a library package has a
// generic type name (breaker.Config, retry.Policy), so an unknown key in it
// must be explained through contexts, not as "in config".
func TestUnknownKeysNameTheirPlace(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty == reflect.TypeFor[time.Duration]() {
			return
		}
		seen[ty] = true
		if _, named := contexts[ty]; !named && ty.PkgPath() != reflect.TypeFor[Config]().PkgPath() {
			t.Errorf("unknown keys in %s would be reported %q: add it to contexts", ty, contextOf(ty))
		}
		for _, f := range fieldsOf(ty) {
			walk(ty.FieldByIndex(f.index).Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	lines := problemLines(t, "lb.yaml", "upstreams: {u: {targets: [{address: 'a:1'}], breaker: {open: 1s}}}\n")
	if want := []string{`lb.yaml:1:56: unknown key "open" in breaker (known: window_type, window_size, window, buckets, min_requests, failure_rate, failure_count, slow_threshold, slow_rate, consecutive_failures, open_for, max_open_for, half_open_probes, failure_statuses)`}; !slices.Equal(lines, want) {
		t.Errorf("problems %q, want %q", lines, want)
	}
}

// TestABadListElementIsReportedOnce is issue 16's bug 10: a list element
// that fails to decode (a list where a status belongs) was reported, and
// then its zero value again by the library's check ("failure_statuses: 0
// is not an HTTP status"), which the documentation promises not to do.
func TestABadListElementIsReportedOnce(t *testing.T) {
	src := `listeners:
  - name: web
    listen: 127.0.0.1:8080
    routes: [{upstream: u}]
upstreams:
  u:
    targets: [{address: 127.0.0.1:9001}]
    breaker: {failure_statuses: ["500", [502]]}
    health:
      passive:
        failure_statuses: [500, x]
`
	want := []string{
		`lb.yaml:8:41: expected a string, got a list`,
		`lb.yaml:11:33: expected an integer, got "x"`,
	}
	if got := problemLines(t, "lb.yaml", src); !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPassiveEjectionIsOnByDefault is issue 16's bug 9: an upstream without
// health settings kept a dead target healthy forever. Passive ejection is
// now on by default, conservatively, and off only when asked.
func TestPassiveEjectionIsOnByDefault(t *testing.T) {
	base := "listeners:\n  - {name: web, listen: 127.0.0.1:8080, routes: [{upstream: u}]}\nupstreams:\n  u:\n    targets: [{address: 127.0.0.1:9001}]\n"
	cfg, err := parse("lb.yaml", []byte(base), testHost())
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Upstreams["u"].Health.Passive; !reflect.DeepEqual(p, DefaultPassive()) {
		t.Fatalf("an upstream without a health block has passive %+v, want the default %+v", p, DefaultPassive())
	}
	cfg, err = parse("lb.yaml", []byte(base+"    health: {passive: {enabled: false}}\n"), testHost())
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Upstreams["u"].Health.Passive; p == nil || !p.Off() {
		t.Fatalf("passive: {enabled: false} gives %+v, want it off", p)
	}
	lines := problemLines(t, "lb.yaml", base+"    health: {passive: {enabled: false, consecutive_failures: 2}}\n")
	if want := []string{"lb.yaml:6:33: passive.enabled: is false: passive ejection is off, so its other keys would do nothing; leave them out"}; !slices.Equal(lines, want) {
		t.Fatalf("problems %q, want %q", lines, want)
	}
}

func TestRegistryStateBudgetDefaultsAndParses(t *testing.T) {
	for src, want := range map[string]Size{
		"registry: {}\n":                          DefaultRegistryMaxStateBytes,
		"registry: {max_state_bytes: 256KiB}\n":   256 * KiB,
		"registry: {max_state_bytes: 1GiB}\n":     GiB,
		"registry: {max_state_bytes: 65536}\n":    64 * KiB,
		"registry: {max_state_bytes: 100MB}\n":    100 * MB,
		"registry: {enabled: false}\n":            DefaultRegistryMaxStateBytes,
		"registry: {data_dir: /var/lib/sb/reg}\n": DefaultRegistryMaxStateBytes,
	} {
		cfg, err := Parse("t.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := cfg.Registry.MaxStateBytes; got != want {
			t.Errorf("%q: max_state_bytes %v, want %v", src, got, want)
		}
	}
	if DefaultRegistryMaxStateBytes != 64*MiB {
		t.Errorf("the default budget is %v; docs/configuration.md and docs/registry.md say 64MiB", DefaultRegistryMaxStateBytes)
	}
}
