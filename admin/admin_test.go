package admin_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/upstream"
)

// testUpstream is what the admin API sees of one upstream.
type testUpstream struct{ *upstream.Upstream }

func (testUpstream) Protocol() string               { return "http1" }
func (testUpstream) ConnStats() map[string][2]int64 { return nil }

// newAdmin runs an upstream of two endpoints (a real upstream.Upstream)
// and an admin server over it.
func newAdmin(t *testing.T, reload func() error) (*admin.Server, *httptest.Server, testUpstream) {
	t.Helper()
	u, err := upstream.New("orders", upstream.Config{
		Targets: []endpoint.Spec{{Address: "127.0.0.1:9001", Weight: 3}, {Address: "127.0.0.1:9002", Zone: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ups := func() []admin.Upstream { return []admin.Upstream{testUpstream{u}} }
	reg.MustRegister(admin.NewEndpointCollector(ups))
	a := admin.New(admin.Source{Upstreams: ups, Reload: reload}, reg, log)
	ts := httptest.NewServer(a.Handler())
	t.Cleanup(ts.Close)
	return a, ts, testUpstream{u}
}

func do(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestUpstreamsShowStateAndReason(t *testing.T) {
	_, ts, px := newAdmin(t, nil)
	since := time.Date(2026, 11, 30, 3, 0, 12, 0, time.UTC)
	u := px
	ep := u.Pool().Snapshot().All[1]
	ep.SetStatus(endpoint.Ejected, "5 consecutive connect failures", since)
	u.Pool().Refresh()

	code, body := do(t, "GET", ts.URL+"/api/v1/upstreams", "")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var v struct{ Upstreams []admin.UpstreamView }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Upstreams) != 1 || v.Upstreams[0].Name != "orders" || v.Upstreams[0].Policy != "round_robin" || v.Upstreams[0].Ready != 1 || v.Upstreams[0].Total != 2 {
		t.Fatalf("upstreams: %+v", v.Upstreams)
	}
	e0, e1 := v.Upstreams[0].Endpoints[0], v.Upstreams[0].Endpoints[1]
	if e0.Address != "127.0.0.1:9001" || e0.Weight != 3 || e0.State != "healthy" {
		t.Errorf("endpoint 0: %+v", e0)
	}
	if e1.Address != "127.0.0.1:9002" || e1.Zone != "b" || e1.State != "ejected" || e1.Reason != "5 consecutive connect failures" || !e1.Since.Equal(since) {
		t.Errorf("endpoint 1: %+v", e1)
	}

	_, metrics := do(t, "GET", ts.URL+"/metrics", "")
	for _, want := range []string{
		`switchboard_endpoint_healthy{endpoint="127.0.0.1:9001",upstream="orders"} 1`,
		`switchboard_endpoint_healthy{endpoint="127.0.0.1:9002",upstream="orders"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestEndpointStateIsOneHotOverEveryState pins the series' identity: an
// endpoint has one switchboard_endpoint_state series per state there is,
// whatever state it is in, and only its current state's is 1; a change of
// state changes values, not series.
func TestEndpointStateIsOneHotOverEveryState(t *testing.T) {
	_, ts, u := newAdmin(t, nil)
	states := []string{"healthy", "slow_start", "probation", "unhealthy", "ejected", "draining", "breaker_open"}
	check := func(current string) {
		t.Helper()
		_, metrics := do(t, "GET", ts.URL+"/metrics", "")
		if n := strings.Count(metrics, "\nswitchboard_endpoint_state{endpoint=\"127.0.0.1:9002\""); n != len(states) {
			t.Errorf("endpoint 9002 has %d switchboard_endpoint_state series, want %d (one per state):\n%s", n, len(states), metrics)
		}
		for _, s := range states {
			v := "0"
			if s == current {
				v = "1"
			}
			want := `switchboard_endpoint_state{endpoint="127.0.0.1:9002",state="` + s + `",upstream="orders"} ` + v + "\n"
			if !strings.Contains(metrics, want) {
				t.Errorf("in state %s, metrics lack %s", current, want)
			}
		}
		healthy := "1"
		if current != "healthy" && current != "probation" {
			healthy = "0"
		}
		if want := `switchboard_endpoint_healthy{endpoint="127.0.0.1:9002",upstream="orders"} ` + healthy + "\n"; !strings.Contains(metrics, want) {
			t.Errorf("in state %s, metrics lack %s", current, want)
		}
	}
	check("healthy")
	ep := u.Pool().Snapshot().All[1]
	for _, st := range []endpoint.State{endpoint.BreakerOpen, endpoint.Probation, endpoint.Unhealthy} {
		ep.SetStatus(st, "test", time.Now())
		u.Pool().Refresh()
		check(st.String())
	}
}

// connsUpstream reports fixed connection counts.
type connsUpstream struct {
	testUpstream
	stats map[string][2]int64
}

func (c connsUpstream) ConnStats() map[string][2]int64 { return c.stats }

// TestUpstreamConnectionsAreDisjoint pins that the connection states add
// up to the open connections: active is open minus idle, so a sum over
// state counts each connection once.
func TestUpstreamConnectionsAreDisjoint(t *testing.T) {
	_, _, u := newAdmin(t, nil)
	reg := prometheus.NewRegistry()
	up := connsUpstream{u, map[string][2]int64{"127.0.0.1:9001": {5, 2}}}
	reg.MustRegister(admin.NewEndpointCollector(func() []admin.Upstream { return []admin.Upstream{up} }))
	ts := httptest.NewServer(admin.New(admin.Source{}, reg, slog.New(slog.NewTextHandler(io.Discard, nil))).Handler())
	defer ts.Close()
	_, metrics := do(t, "GET", ts.URL+"/metrics", "")
	for _, want := range []string{
		`switchboard_upstream_connections{endpoint="127.0.0.1:9001",state="active",upstream="orders"} 3` + "\n",
		`switchboard_upstream_connections{endpoint="127.0.0.1:9001",state="idle",upstream="orders"} 2` + "\n",
		`switchboard_upstream_connections{endpoint="127.0.0.1:9002",state="active",upstream="orders"} 0` + "\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, `state="open"`) {
		t.Errorf("a connection series has state open, which overlaps idle:\n%s", metrics)
	}
}

// TestBuildInfo pins switchboard_build_info: one series of value 1 with
// the build's version, revision and Go version.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(admin.NewBuildInfoCollector())
	ts := httptest.NewServer(admin.New(admin.Source{}, reg, slog.New(slog.NewTextHandler(io.Discard, nil))).Handler())
	defer ts.Close()
	_, metrics := do(t, "GET", ts.URL+"/metrics", "")
	want := `switchboard_build_info{goversion="` + runtime.Version() + `",revision="`
	if !strings.Contains(metrics, want) || !strings.Contains(metrics, `version="`) {
		t.Fatalf("metrics lack %s...:\n%s", want, metrics)
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "switchboard_build_info{") && !strings.HasSuffix(line, "} 1") {
			t.Errorf("build info is not 1: %s", line)
		}
	}
}

func TestWritesNeedTheToken(t *testing.T) {
	calls := 0
	a, ts, _ := newAdmin(t, func() error { calls++; return nil })
	if code, body := do(t, "POST", ts.URL+"/api/v1/reload", ""); code != 403 || !strings.Contains(body, "set admin.token") {
		t.Fatalf("no token configured: %d %s", code, body)
	}
	a.SetToken("s3cret")
	if code, _ := do(t, "POST", ts.URL+"/api/v1/reload", ""); code != 401 {
		t.Fatalf("missing token: %d", code)
	}
	if code, _ := do(t, "POST", ts.URL+"/api/v1/reload", "wrong"); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	if calls != 0 {
		t.Fatalf("reload ran %d times without a valid token", calls)
	}
	if code, body := do(t, "POST", ts.URL+"/api/v1/reload", "s3cret"); code != 200 || calls != 1 {
		t.Fatalf("right token: %d %s, calls %d", code, body, calls)
	}
	if code, _ := do(t, "GET", ts.URL+"/debug/pprof/", ""); code != 401 {
		t.Fatalf("pprof without the token: %d, want 401", code)
	}
}

func TestReloadFailureIsReported(t *testing.T) {
	a, ts, _ := newAdmin(t, func() error { return errors.New("bad.yaml:3:5: unknown key") })
	a.SetToken("t")
	code, body := do(t, "POST", ts.URL+"/api/v1/reload", "t")
	if code != 422 || !strings.Contains(body, "bad.yaml:3:5: unknown key") {
		t.Fatalf("%d %s", code, body)
	}
}

func TestReadiness(t *testing.T) {
	a, ts, _ := newAdmin(t, nil)
	if code, _ := do(t, "GET", ts.URL+"/readyz", ""); code != 503 {
		t.Fatalf("before ready: %d", code)
	}
	a.SetReady(true)
	if code, _ := do(t, "GET", ts.URL+"/readyz", ""); code != 200 {
		t.Fatalf("ready: %d", code)
	}
	if code, _ := do(t, "GET", ts.URL+"/healthz", ""); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	if code, body := do(t, "GET", ts.URL+"/nope", ""); code != 404 || !strings.Contains(body, "no admin endpoint GET /nope") {
		t.Fatalf("unknown path: %d %s", code, body)
	}
}

// TestARebindingPageCannotReadTheAdminAPI is issue 16's bug 7: the admin
// API answered any Host, so a page whose DNS name an attacker rebinds to
// 127.0.0.1 could read the upstreams, metrics and profiles through its
// visitor's browser. Without a token only an IP, localhost or the listen
// host are answered; with a token (an exposed admin API) any Host is.
func TestARebindingPageCannotReadTheAdminAPI(t *testing.T) {
	a, ts, _ := newAdmin(t, nil)
	a.SetListen("admin.internal:9901")
	get := func(host string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+"/api/v1/upstreams", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"evil.example": 403, "evil.example:9901": 403, "127.0.0.1:9901": 200, "[::1]:9901": 200,
		"localhost:9901": 200, "admin.internal:9901": 200,
	} {
		if got := get(host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	a.SetToken("t0ken")
	if got := get("evil.example"); got != 200 {
		t.Errorf("with a token (an exposed admin API) Host evil.example: %d, want 200", got)
	}
}
