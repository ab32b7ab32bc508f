package admin_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/admin"
)

func TestDashboardPageIsServedWholeFromTheBinary(t *testing.T) {
	_, ts, _ := newAdmin(t, nil)
	weight := 0
	for _, f := range []struct{ path, ctype string }{{"/ui/", "text/html"}, {"/ui/app.js", "text/javascript"}, {"/ui/style.css", "text/css"}} {
		resp, err := http.Get(ts.URL + f.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		weight += len(b)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), f.ctype) {
			t.Fatalf("%s: %d %s", f.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// Nothing is loaded from elsewhere, and the browser is told so.
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", f.path, csp)
		}
		if m := regexp.MustCompile(`(src|href)=["']?(https?:)?//`).Find(b); m != nil {
			t.Errorf("%s loads %q from another origin", f.path, m)
		}
		if f.path == "/ui/app.js" && strings.Contains(string(b), "innerHTML") {
			t.Errorf("app.js writes HTML: values must go into the page as text")
		}
	}
	t.Logf("page weight: %d bytes", weight)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(ts.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("/ui: %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// The page follows the admin API's rules: without a token, a page that
// rebinds its DNS name to loopback cannot read it.
func TestDashboardRefusesARebindingHost(t *testing.T) {
	_, ts, _ := newAdmin(t, nil)
	for _, p := range []string{"/ui/", "/api/v1/dashboard"} {
		req, _ := http.NewRequest("GET", ts.URL+p, nil)
		req.Host = "attacker.example:9901"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with Host attacker.example: %d, want 403", p, resp.StatusCode)
		}
	}
}

func TestDashboardAnswersEverySectionInOnePoll(t *testing.T) {
	reg := prometheus.NewRegistry()
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_http_requests_total"}, []string{"route", "code"})
	reqs.WithLabelValues("web", "200").Add(7)
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "switchboard_unrelated_total"})
	reg.MustRegister(reqs, other)
	src := admin.Source{
		Upstreams: func() []admin.Upstream { return nil },
		Listeners: func() any { return []string{"web"} },
		Reloads:   func() any { return []map[string]any{{"ok": false, "error": "bad"}} },
		Registry:  func() any { return []string{"svc-1"} },
	}
	ts := httptest.NewServer(admin.New(src, reg, slog.New(slog.NewTextHandler(io.Discard, nil))).Handler())
	defer ts.Close()
	code, body := do(t, "GET", ts.URL+"/api/v1/dashboard", "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var d struct {
		Listeners []string
		Upstreams []any
		Reloads   []map[string]any
		Registry  []string
		Discovery []any
		TCP       []any
		Metrics   map[string][]admin.Sample
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Listeners) != 1 || d.Reloads[0]["error"] != "bad" || d.Registry[0] != "svc-1" || d.Upstreams == nil || d.Discovery == nil || d.TCP == nil {
		t.Fatalf("sections: %s", body)
	}
	s := d.Metrics["switchboard_http_requests_total"]
	if len(s) != 1 || s[0].Value != 7 || s[0].Labels["route"] != "web" {
		t.Fatalf("requests series: %+v", s)
	}
	if _, ok := d.Metrics["switchboard_unrelated_total"]; ok {
		t.Fatalf("the dashboard carries a family it does not draw")
	}
	for _, p := range []string{"/api/v1/listeners", "/api/v1/reloads", "/api/v1/registry"} {
		if code, body := do(t, "GET", ts.URL+p, ""); code != 200 {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
}

func TestRegistryViewIs404WithoutTheEmbeddedRegistry(t *testing.T) {
	_, ts, _ := newAdmin(t, nil)
	if code, body := do(t, "GET", ts.URL+"/api/v1/registry", ""); code != 404 || !strings.Contains(body, "not running") {
		t.Fatalf("%d %s", code, body)
	}
}
