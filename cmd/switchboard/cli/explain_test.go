package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/cli"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// TestExplainPrintsTheRouteTheEndpointsAndTheLimits runs switchboard
// serve and asks it with switchboard explain, as a user would: by URL
// with headers after it, by path with a Host header and the admin address
// read from --config, and as JSON; and a mistake in each way gets a clear
// message.
func TestExplainPrintsTheRouteTheEndpointsAndTheLimits(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	dead := testutil.FreeAddr(t) // nothing listens: its active check fails
	admin, listen := testutil.FreeAddr(t), testutil.FreeAddr(t)
	path := writeConfig(t, fmt.Sprintf(`admin:
  listen: %s
log: {level: error}
listeners:
  - name: web
    listen: %s
    routes:
      - name: admin-site
        match: {host: admin.example.com}
        upstream: orders
      - name: canary
        match: {path_prefix: /orders, headers: {X-Env: canary}}
        upstream: orders
      - name: orders
        match: {path_prefix: /orders, methods: [GET]}
        upstream: orders
        rate_limit: [{name: per_client, rate: 5/m, burst: 5, key: client_ip}]
upstreams:
  orders:
    targets: [{address: %s}, {address: %s}]
    health:
      active: {type: tcp, interval: 500ms, allow_fast: true, timeout: 400ms, fall: 1, rise: 1, max_backoff: 500ms}
`, admin, listen, backend.Listener.Addr(), dead))

	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- cli.Run(ctx, []string{"serve", "--config", path}, io.Discard, &stderr) }()
	defer func() { cancel(); <-exited }()
	testutil.WaitFor(t, 20*time.Second, "the dead endpoint to be out", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("serve exited with %d:\n%s", code, stderr.String())
		default:
		}
		resp, err := http.Get("http://" + admin + "/api/v1/upstreams")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct{ Upstreams []struct{ Ready int } }
		return json.NewDecoder(resp.Body).Decode(&v) == nil && len(v.Upstreams) == 1 && v.Upstreams[0].Ready == 1
	})

	code, out, errs := run("explain", "--admin", admin, "http://shop.example.com/orders/../orders/7", "-H", "X-Env: prod", "--client-ip", "192.0.2.9")
	if code != 0 || errs != "" {
		t.Fatalf("explain: exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"Request: GET shop.example.com/orders/7 on listener web\n",
		"  (path normalised from /orders/../orders/7)\n",
		`  no     admin-site  host differs: "shop.example.com" is not "admin.example.com"` + "\n",
		`  no     canary      header X-Env value differs: "prod" is not "canary"` + "\n",
		"  match  orders",
		"Upstream orders, policy round_robin: 1 of 2 endpoints eligible\n",
		dead + "  unhealthy  out: 1 consecutive TCP check failures: ",
		backend.Listener.Addr().String() + "  healthy    eligible\n",
		`  per_client  token_bucket 5/m  key client_ip="192.0.2.9"  allowed (4 of 5 left after it)` + "\n",
		"Decision: route orders: would go to upstream orders, endpoint chosen by round_robin among 1 of 2 endpoints; " + dead + " is out: unhealthy: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the explanation lacks %q:\n%s", want, out)
		}
	}

	code, out, errs = run("explain", "--config", path, "--json", "-X", "post", "-H", "Host: admin.example.com", "/x")
	var e struct {
		Routing struct{ Method, Host, Route string }
	}
	if code != 0 || errs != "" || json.Unmarshal([]byte(out), &e) != nil || e.Routing.Method != "POST" || e.Routing.Host != "admin.example.com" || e.Routing.Route != "admin-site" {
		t.Fatalf("explain --config --json: exit %d, stderr %q, routing %+v:\n%s", code, errs, e.Routing, out)
	}

	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"explain", "--admin", admin, "-H", "X-Env canary", "/orders"}, 2, `switchboard explain: -H "X-Env canary": want 'Name: Value'`},
		{[]string{"explain", "--admin", admin, "--listener", "nope", "/orders"}, 1, `switchboard explain: listener "nope" is not a running http listener`},
		{[]string{"explain", "--admin", admin, "--client-ip", "x", "/orders"}, 1, `switchboard explain: parameter client_ip: "x" is not an IP address`},
		{[]string{"explain", "--admin", admin, "orders"}, 2, `switchboard explain: "orders" is neither a path (/orders/1) nor an http(s) URL`},
		{[]string{"explain", "--admin", admin}, 2, "switchboard explain: give the request's URL or path"},
		{[]string{"explain", "--admin", admin, "/a", "/b"}, 2, `switchboard explain: one URL or path, got "/a" and "/b"`},
	} {
		code, _, errs := run(c.args...)
		if code != c.code || !strings.HasPrefix(errs, c.err) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.err)
		}
	}
}
