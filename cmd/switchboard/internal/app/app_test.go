package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func freeAddr(t *testing.T) string { return testutil.FreeAddr(t) }

func named(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostport(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// config renders a config whose /api route round-robins over targets and,
// when withNew, has a /new route to the "fresh" upstream.
func config(listen string, targets []string, weight int, withNew bool, fresh string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {listen: 127.0.0.1:0}\nlog: {level: error}\nlisteners:\n  - name: web\n    listen: %s\n    routes:\n", listen)
	if withNew {
		b.WriteString("      - match: {path_prefix: /new}\n        upstream: fresh\n")
	}
	b.WriteString("      - match: {path_prefix: /api}\n        upstream: api\nupstreams:\n  api:\n    targets:\n")
	for _, t := range targets {
		fmt.Fprintf(&b, "      - {address: %s, weight: %d}\n", t, weight)
	}
	if withNew {
		fmt.Fprintf(&b, "  fresh:\n    targets: [{address: %s}]\n", fresh)
	}
	return b.String()
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	// Write then rename, as editors and config managers do, so the
	// watcher never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadUnderLoadDropsNothing(t *testing.T) {
	a1, a2, fresh := named(t, "a1"), named(t, "a2"), named(t, "fresh")
	listen := freeAddr(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "switchboard.yaml")
	writeFile(t, path, config(listen, []string{hostport(a1), hostport(a2)}, 1, false, ""))

	a, err := app.New(path, app.Options{Stderr: logOnFailure(t)})
	if err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan error, 100)
	a.Reloaded = func(err error) { reloaded <- err }
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()

	// Clients: keep-alive connections hammering /api for the whole test.
	var stop atomic.Bool
	var failures, okCount atomic.Int64
	progress := make(chan struct{}, 1024)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			for i := 0; i < 200000 && !stop.Load(); i++ {
				resp, err := c.Get("http://" + listen + "/api")
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, body))
					continue
				}
				okCount.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	waitProgress := func(n int) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case <-progress:
			case <-deadline:
				t.Fatalf("clients made no progress")
			}
		}
	}

	const reloads = 20
	const invalidAt = 7
	for i := 0; i < reloads; i++ {
		waitProgress(20)
		var data string
		switch {
		case i == invalidAt:
			data = config(listen, []string{hostport(a1)}, 1, false, "") + "  bogus_key: 1\n"
		case i == reloads-1:
			data = config(listen, []string{hostport(a1), hostport(a2)}, 2, true, hostport(fresh))
		default:
			targets := []string{hostport(a1), hostport(a2)}
			if i%2 == 1 {
				targets = targets[:1]
			}
			// Weight 2 first: the first write must differ from the
			// file New read. Written before the watch began (a loaded
			// run), an identical file is rightly no change to catch up on.
			data = config(listen, targets, 1+(i+1)%3, false, "")
		}
		writeFile(t, path, data)
		var err error
		select {
		case err = <-reloaded:
		case <-time.After(10 * time.Second):
			t.Fatalf("reload %d: the file change was not picked up", i)
		}
		if (err != nil) != (i == invalidAt) {
			t.Fatalf("reload %d: err = %v", i, err)
		}
		// Drain duplicate watcher events for this write.
		for len(reloaded) > 0 {
			if err := <-reloaded; (err != nil) != (i == invalidAt) {
				t.Fatalf("reload %d (repeat): err = %v", i, err)
			}
		}
	}
	waitProgress(20)
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed across %d reloads; first: %v", n, n+okCount.Load(), reloads, firstErr.Load())
	}
	expectFresh(t, listen, "new route after reload")
	metrics := scrape(t, a.AdminAddr())
	if !strings.Contains(metrics, "switchboard_config_reloads_total{result=\"failure\"} 1\n") {
		t.Fatalf("want exactly one reload failure counted; metrics:\n%s", grep(metrics, "reload"))
	}
	t.Logf("%d requests, 0 failed, across %d reloads", okCount.Load(), reloads)
}

// A change written after New read the file but before Run watched it
// raises no file event; Run catches it up.
func TestChangeBeforeRunIsApplied(t *testing.T) {
	a1, fresh := named(t, "a1"), named(t, "fresh")
	listen := freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	writeFile(t, path, config(listen, []string{hostport(a1)}, 1, false, ""))
	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan error, 10)
	a.Reloaded = func(err error) { reloaded <- err }
	writeFile(t, path, config(listen, []string{hostport(a1)}, 1, true, hostport(fresh)))
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatalf("catch-up reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the change made before Run was not applied")
	}
	expectFresh(t, listen, "the route the change added")
}

// A config file that cannot be watched (the user is out of inotify
// instances) is checked every second instead: a change still reloads.
func TestUnwatchableConfigFileIsPolled(t *testing.T) {
	a1, fresh := named(t, "a1"), named(t, "fresh")
	listen := freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	writeFile(t, path, config(listen, []string{hostport(a1)}, 1, false, ""))
	a, err := app.New(path, app.Options{Stderr: logOnFailure(t)})
	if err != nil {
		t.Fatal(err)
	}
	app.NoWatcher(a)
	reloaded := make(chan error, 10)
	a.Reloaded = func(err error) { reloaded <- err }
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	// Ready once Run looks at the file: a change before that would be
	// caught up by Run itself, polling or not.
	testutil.WaitFor(t, 5*time.Second, "Run to be ready", func() bool {
		resp, err := http.Get("http://" + a.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	writeFile(t, path, config(listen, []string{hostport(a1)}, 1, true, hostport(fresh)))
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a change of an unwatchable config file was not picked up")
	}
	expectFresh(t, listen, "the route the change added")
}

// expectFresh checks that listen's /new route answers 200 "fresh".
func expectFresh(t *testing.T, listen, what string) {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/new")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "fresh" {
		t.Fatalf("%s: %d %q", what, resp.StatusCode, body)
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestListenersAddedAndRemovedOnReload(t *testing.T) {
	b := named(t, "b")
	l1, l2 := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "switchboard.yaml")
	one := fmt.Sprintf(`admin: {enabled: false}
shutdown_timeout: 2s
listeners:
  - name: one
    listen: %s
    routes: [{match: {path_prefix: /}, upstream: u}]
upstreams:
  u: {targets: [{address: %s}]}
`, l1, hostport(b))
	two := strings.Replace(one, "upstreams:", fmt.Sprintf("  - name: two\n    listen: %s\n    routes: [{match: {path_prefix: /}, upstream: u}]\nupstreams:", l2), 1)
	writeFile(t, path, one)
	a, err := app.New(path, app.Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	if _, err := net.Dial("tcp", l2); err == nil {
		t.Fatal("listener two answers before it is configured")
	}
	writeFile(t, path, two)
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{l1, l2} {
		resp, err := http.Get("http://" + l + "/")
		if err != nil {
			t.Fatalf("listener %s after adding two: %v", l, err)
		}
		resp.Body.Close()
	}
	writeFile(t, path, one)
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	// The removed listener's socket is closed by the time Reload returns;
	// its in-flight requests drain in the background.
	if c, err := net.Dial("tcp", l2); err == nil {
		c.Close()
		t.Fatal("removed listener still accepts connections")
	}
	resp, err := http.Get("http://" + l1 + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// logOnFailure collects an app's log and prints it if the test fails, so
// that a failure (a reload that never came, say) shows what the app saw.
func logOnFailure(t *testing.T) io.Writer {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("app log:\n%s", buf.String())
		}
	})
	return writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
