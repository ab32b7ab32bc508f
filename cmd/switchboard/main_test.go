package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/cli"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// run is the command as main runs it, on the given output.
func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run(context.Background(), args, stdout, stderr)
}

func TestValidateReportsEveryProblemWithPosition(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte(`admin:
  listen: 127.0.0.1:9901
listeners:
  - name: web
    listen: 127.0.0.1:8080
    routes:
      - match: {path_prefix: /}
        upstream: ordrs
upstreams:
  orders:
    balance: {policy: round_robin}
    timeouts: {connect: fast}
    targets:
      - {address: 127.0.0.1:9001, wieght: 3}
`), 0o600)
	var out, errb bytes.Buffer
	code := run([]string{"validate", "--config", path}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %q stderr %q", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantPrefixes := []string{path + ":8:19: ", path + ":12:25: ", path + ":14:35: "}
	if len(lines) != len(wantPrefixes) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(wantPrefixes), out.String())
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(lines[i], p) {
			t.Errorf("problem %d = %q, want prefix %q", i, lines[i], p)
		}
	}

	good := filepath.Join(t.TempDir(), "good.yaml")
	os.WriteFile(good, []byte(strings.NewReplacer("ordrs", "orders", "fast", "2s", "wieght", "weight").Replace(mustRead(t, path))), 0o600)
	out.Reset()
	if code := run([]string{"validate", "-c", good}, &out, &errb); code != 0 {
		t.Fatalf("valid file: exit %d: %s", code, out.String())
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnknownCommandAndMissingFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"serve"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--config FILE is required") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// buildBinary builds switchboard once per test run.
var buildOnce struct {
	sync.Once
	path string
	err  error
}

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchboard-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.path = filepath.Join(dir, "switchboard")
		out, err := exec.Command("go", "build", "-o", buildOnce.path, ".").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

func freeAddr(t *testing.T) string { return testutil.FreeAddr(t) }

// lineWaiter lets a test wait for a line in a process's log.
type lineWaiter struct {
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

func watchLines(r io.Reader) *lineWaiter {
	w := &lineWaiter{}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.cond.Broadcast()
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.lines = append(w.lines, "<EOF>")
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	return w
}

// wait blocks until a line contains sub, the stream ends, or timeout.
func (w *lineWaiter) wait(t *testing.T, sub string, timeout time.Duration) {
	t.Helper()
	timer := time.AfterFunc(timeout, func() {
		w.mu.Lock()
		w.lines = append(w.lines, "<TIMEOUT>")
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 0; ; i++ {
		for ; i < len(w.lines); i++ {
			switch l := w.lines[i]; {
			case strings.Contains(l, sub):
				return
			case l == "<EOF>" || l == "<TIMEOUT>":
				t.Fatalf("no log line containing %q; log:\n%s", sub, strings.Join(w.lines, "\n"))
			}
		}
		w.cond.Wait()
		i--
	}
}

func TestDrainOnSIGTERM(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	defer backend.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	listen, adminAddr := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`admin: {listen: %s}
shutdown_timeout: 20s
listeners:
  - name: web
    listen: %s
    routes: [{match: {path_prefix: /}, upstream: app}]
upstreams:
  app: {targets: [{address: %s}]}
`, adminAddr, listen, strings.TrimPrefix(backend.URL, "http://"))), 0o600)

	cmd := exec.Command(binary(t), "serve", "--config", path)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	logs := watchLines(stderr)
	logs.wait(t, "switchboard started", 20*time.Second)
	waitReady(t, adminAddr)

	// SIGHUP reloads.
	cmd.Process.Signal(syscall.SIGHUP)
	logs.wait(t, "config reloaded", 10*time.Second)

	type result struct {
		status int
		body   string
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + listen + "/slow")
		if err != nil {
			slow <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- result{resp.StatusCode, string(b), err}
	}()
	select {
	case <-entered:
	case r := <-slow:
		t.Fatalf("the slow request ended before reaching the backend: %+v", r)
	case <-time.After(20 * time.Second):
		t.Fatal("the slow request never reached the backend")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logs.wait(t, "shutting down", 10*time.Second)
	// New connections are refused while the slow request is in flight.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepts new connections after SIGTERM")
		}
		time.Sleep(5 * time.Millisecond) // polling another process's socket: no event to wait on
	}
	select {
	case r := <-slow:
		t.Fatalf("in-flight request ended before its backend answered: %+v", r)
	default:
	}
	close(release)
	r := <-slow
	if r.err != nil || r.status != 200 || r.body != "done /slow" {
		t.Fatalf("in-flight request: %+v, want 200 \"done /slow\"", r)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("switchboard exited with %v, want status 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("switchboard did not exit after draining")
	}
}

func waitReady(t *testing.T, admin string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 20s (last error %v)", err)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's readiness
	}
}

// TestServeRunsAProcessorMoreThanTheDefault: the binary sets GOMAXPROCS
// to one more than Go's default, so that the event-loop engines run a
// loop per CPU (evloop.DefaultLoops) with a processor left for the rest,
// and keeps the GOMAXPROCS environment variable's value when it is set.
func TestServeRunsAProcessorMoreThanTheDefault(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Fatal("GOMAXPROCS is set in the test's environment: the default cannot be known here")
	}
	def := runtime.GOMAXPROCS(0) // go test leaves it alone without -cpu
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", def + 1},
		{"GOMAXPROCS=1", 1},
	} {
		adminAddr := freeAddr(t)
		path := filepath.Join(t.TempDir(), "switchboard.yaml")
		os.WriteFile(path, []byte(fmt.Sprintf("admin: {listen: %s}\nlisteners: []\n", adminAddr)), 0o600)
		cmd := exec.Command(binary(t), "serve", "--config", path)
		cmd.Env = os.Environ()
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitReady(t, adminAddr)
		resp, err := http.Get("http://" + adminAddr + "/metrics")
		if err != nil {
			cmd.Process.Kill()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		want := fmt.Sprintf("\ngo_sched_gomaxprocs_threads %d\n", tc.want)
		if !strings.Contains(string(b), want) {
			i := strings.Index(string(b), "\ngo_sched_gomaxprocs_threads")
			t.Fatalf("environment %q: want %q in /metrics; it has %q", tc.env, strings.TrimSpace(want), string(b[max(i, 0):min(max(i, 0)+40, len(b))]))
		}
	}
}
