package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// dashboardFile is the Grafana dashboard shipped in deploy/.
var dashboardFile = filepath.Join("..", "..", "..", "..", "deploy", "grafana", "switchboard.json")

// metricName finds the metric names a PromQL expression uses.
var metricName = regexp.MustCompile(`switchboard_[a-z_]+`)

// TestGrafanaDashboardQueriesExportedMetrics starts a real switchboard
// whose configuration exercises what the dashboard shows (routes, an
// upstream with active checks and a dead endpoint, a rate limit, a
// concurrency limit, a route breaker, a TLS listener, a tcp listener),
// sends traffic through it and reloads it once, scrapes /metrics, and
// fails for every metric a query of the dashboard names that the running
// switchboard does not export: a query over a name that does not exist
// draws an empty panel, silently.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Inputs []struct {
			Name     string `json:"name"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		Panels []struct {
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	if len(dash.Inputs) != 1 || dash.Inputs[0].Name != "DS_PROMETHEUS" || dash.Inputs[0].PluginID != "prometheus" {
		t.Errorf("inputs %+v, want the one Prometheus datasource DS_PROMETHEUS", dash.Inputs)
	}
	// Every query, and where it is: a panel's, or a variable's.
	uses := map[string][]string{}
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) > 0 && p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q reads datasource %q, want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
		}
		for _, tg := range p.Targets {
			queries++
			for _, name := range metricName.FindAllString(tg.Expr, -1) {
				uses[name] = append(uses[name], "panel "+p.Title)
			}
		}
	}
	for _, v := range dash.Templating.List {
		queries++
		for _, name := range metricName.FindAllString(v.Definition, -1) {
			uses[name] = append(uses[name], "variable "+v.Name)
		}
	}
	if queries < 20 || len(uses) < 20 {
		t.Fatalf("the dashboard has %d queries over %d metrics: not the dashboard this test is for", queries, len(uses))
	}

	exported := exportedMetrics(t, runExercised(t))
	var missing []string
	for name, where := range uses {
		if !exported[name] {
			missing = append(missing, fmt.Sprintf("%s (%s)", name, strings.Join(slices.Compact(where), ", ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("the dashboard queries %s, which the running switchboard does not export", m)
	}
}

// runExercised starts a switchboard with a configuration that exercises
// every kind of series, drives traffic, a tcp connection and a reload
// through it, and returns its admin address once the series are there.
func runExercised(t *testing.T) string {
	t.Helper()
	live := named(t, "live")
	dead := testutil.DeadAddr(t)
	echo := testutil.ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
	cert, key := testutil.WriteKeyPair(t, t.TempDir(), "web")
	yaml := fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: api
        match: {path_prefix: /api}
        upstream: api
        rate_limit:
          - {name: per_client, rate: 1000/s, burst: 1000, key: client_ip}
        concurrency: {max_in_flight: 100}
        breaker: {consecutive_failures: 1000}
      - {name: flaky, match: {path_prefix: /flaky}, upstream: flaky}
  - name: secure
    listen: 127.0.0.1:0
    tls: {cert_file: %s, key_file: %s}
    routes:
      - {name: secure, match: {path_prefix: /}, upstream: api}
  - name: raw
    protocol: tcp
    listen: 127.0.0.1:0
    upstream: echo
upstreams:
  api:
    health:
      panic_threshold: 0.1
      active: {type: tcp, interval: 200ms, allow_fast: true, timeout: 150ms, fall: 1, rise: 1}
    targets: [{address: %[3]s}, {address: %[4]s}]
  flaky:
    targets: [{address: %[4]s}, {address: %[3]s}]
  echo:
    targets: [{address: %[5]s}]
`, cert, key, hostport(live), dead, echo)
	a, path := serve(t, yaml)
	web := "http://" + a.Plane().Addr("web")
	admin := a.AdminAddr()
	// The dead endpoint of api fails its checks and is taken out, before
	// any request could meet it.
	testutil.WaitFor(t, 10*time.Second, "the dead endpoint's failed check and state change", func() bool {
		m := scrape(t, admin)
		return strings.Contains(m, `switchboard_health_checks_total{endpoint="`+dead+`",result="fail",upstream="api"}`) &&
			strings.Contains(m, `switchboard_endpoint_state_changes_total{endpoint="`+dead+`",state="unhealthy",upstream="api"}`)
	})

	c := &http.Client{Timeout: 10 * time.Second}
	// Round robin over flaky, which has no checks, sends some requests
	// to its dead endpoint first: connect failures, retried.
	for i := range 6 {
		prefix := "/api/"
		if i%2 == 1 {
			prefix = "/flaky/"
		}
		resp, err := c.Post(web+prefix+fmt.Sprint(i), "text/plain", strings.NewReader("ping"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s%d: %d", prefix, i, resp.StatusCode)
		}
	}
	conn, err := net.Dial("tcp", a.Plane().Addr("raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "hello\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("tcp echo: %q, %v", line, err)
	}
	writeFile(t, path, yaml+"# touched\n")
	if err := a.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	return admin
}

// exportedMetrics scrapes admin's /metrics and returns the names of the
// series it exports, a histogram's _bucket, _sum and _count included.
func exportedMetrics(t *testing.T, admin string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(scrape(t, admin), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[name] = true
	}
	if !out["switchboard_http_requests_total"] {
		t.Fatal("the scrape has no switchboard_http_requests_total: not a switchboard's /metrics")
	}
	return out
}
