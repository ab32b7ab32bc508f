package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
)

// restartable is a backend on a fixed address that can be killed (its
// listener and connections closed) and started again on the same address.
type restartable struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func newRestartable(t *testing.T) *restartable {
	b := &restartable{t: t, addr: freeAddr(t)}
	b.start()
	t.Cleanup(b.kill)
	return b
}

func (b *restartable) start() {
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
}

func (b *restartable) kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Close()
		b.srv = nil
	}
}

// chromium finds Debian's Chromium; scripts/test.sh installs it, so CI
// runs the browser tests.
func chromium(t *testing.T) string {
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (scripts/test.sh installs it)")
		}
		t.Skip("chromium is not installed")
	}
	return p
}

// browser starts a headless Chromium for one test.
func browser(t *testing.T) context.Context {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// The dashboard in a real browser: an endpoint killed during the test
// turns red with its reason within 2s of switchboard seeing it, and comes
// back green.
func TestDashboardShowsAnEndpointGoingDownAndBack(t *testing.T) {
	ctx := browser(t)
	a1, b := newRestartable(t), newRestartable(t)
	listen, adminAddr := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	writeFile(t, path, fmt.Sprintf(`admin:
  listen: %s
listeners:
  - name: web
    listen: %s
    routes:
      - match: {path_prefix: /}
        upstream: web
upstreams:
  web:
    targets: [{address: %s}, {address: %s}]
    health:
      active: {type: http, path: /, interval: 200ms, allow_fast: true, timeout: 150ms, fall: 1, rise: 1, max_backoff: 200ms}
`, adminAddr, listen, a1.addr, b.addr))
	a, err := app.New(path, app.Options{Stderr: logOnFailure(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	var pool *endpoint.Pool
	for _, u := range a.Plane().Upstreams() {
		if u.Name() == "web" {
			pool = u.Pool()
		}
	}
	endpointtest.WaitReady(t, pool, 2)
	for i := 0; i < 4; i++ { // some traffic for the rates
		if resp, err := http.Get("http://" + listen + "/"); err == nil {
			resp.Body.Close()
		}
	}

	row := `tr[data-endpoint="` + b.addr + `"]`
	if err := runWithin(ctx, 20*time.Second,
		chromedp.Navigate("http://"+a.AdminAddr()+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-state="healthy"]`)),
	); err != nil {
		t.Fatalf("the dashboard does not show %s healthy: %v", b.addr, err)
	}

	killed := time.Now()
	b.kill()
	endpointtest.WaitReady(t, pool, 1)
	seen := time.Now()
	if err := runWithin(ctx, 2*time.Second, chromedp.WaitVisible(chromedp.CSS(row+`[data-state="unhealthy"]`))); err != nil {
		t.Fatalf("%s was not shown unhealthy within 2s of switchboard seeing it (%v after the kill): %v", b.addr, time.Since(killed), err)
	}
	t.Logf("shown down %v after the kill, %v after switchboard saw it", time.Since(killed), time.Since(seen))
	reason, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+` td.reason`)))
	if err != nil {
		t.Fatal(err)
	}
	color, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('`+row+` td.state')).color`))
	if err != nil {
		t.Fatal(err)
	}
	var st endpoint.Status
	for _, ep := range pool.Snapshot().All {
		if ep.Address() == b.addr {
			st = ep.Status()
		}
	}
	if reason != st.Reason || !strings.Contains(reason, "connect") {
		t.Errorf("the page gives the reason %q; switchboard's is %q (a failed connect)", reason, st.Reason)
	}
	if color != "rgb(207, 34, 46)" {
		t.Errorf("the unhealthy state is drawn in %s, want red rgb(207, 34, 46)", color)
	}
	if out := os.Getenv("SWITCHBOARD_DASHBOARD_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b.start()
	endpointtest.WaitReady(t, pool, 2)
	if err := runWithin(ctx, 2*time.Second, chromedp.WaitVisible(chromedp.CSS(row+`[data-state="healthy"]`))); err != nil {
		t.Fatalf("%s was not shown healthy again within 2s: %v", b.addr, err)
	}
	color, err = chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('`+row+` td.state')).color`))
	if err != nil {
		t.Fatal(err)
	}
	if color != "rgb(26, 127, 55)" {
		t.Errorf("the healthy state is drawn in %s, want green rgb(26, 127, 55)", color)
	}
}

// runWithin runs actions in the browser, failing after d. (Canceling a
// context derived from the tab's ends the run, not the tab.)
func runWithin(ctx context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}
