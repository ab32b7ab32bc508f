package registryd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
)

// These tests drive the registry with the Consul clients of other
// languages that our users' services run: Debian's python3-consul (0.7.1)
// and the npm package consul (node-consul). Each script registers with a
// TTL check, passes it, then parks in a blocking health query that the Go
// test releases by registering a second instance.

// needTool skips t when a client is missing, except under CI=true where
// the test must run; msg says what to install.
func needTool(t *testing.T, ok bool, msg string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s", msg)
	}
	t.Skipf("%s; CI runs this test", msg)
}

func TestPythonConsulClient(t *testing.T) {
	const py = "/usr/bin/python3"
	_, err := os.Stat(py)
	needTool(t, err == nil, "/usr/bin/python3 is missing (install the Debian package python3-consul, which brings it)")
	probe := exec.Command(py, "-c", "import consul")
	needTool(t, probe.Run() == nil, "python-consul is not importable by /usr/bin/python3 (install the Debian package python3-consul)")
	script, _ := filepath.Abs(filepath.Join("testdata", "pyclient.py"))
	runClientScript(t, "pysvc", "py", []string{py, script})
}

func TestNodeConsulClient(t *testing.T) {
	node, err := exec.LookPath("node")
	needTool(t, err == nil, "node is not on PATH (install the Debian packages nodejs and npm, then npm ci --prefix registryd/testdata/nodeclient)")
	_, err = os.Stat(filepath.Join("testdata", "nodeclient", "node_modules", "consul", "package.json"))
	needTool(t, err == nil, "node-consul is not installed: run npm ci --prefix registryd/testdata/nodeclient")
	script, _ := filepath.Abs(filepath.Join("testdata", "nodeclient", "client.js"))
	runClientScript(t, "nodesvc", "js", []string{node, script})
}

func runClientScript(t *testing.T, service, tag string, argv []string) {
	s := startServer(t, Config{})
	host, port, _ := net.SplitHostPort(s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], host, port)...)
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_TOKEN=", "CONSUL_HTTP_ADDR=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	exited := make(chan struct{})
	var exitErr error
	go func() { wg.Wait(); exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })

	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				<-exited
				t.Fatalf("%s: script exited (%v) before %s; stderr:\n%s", argv[0], exitErr, what, stderr.String())
			}
			return l
		case <-ctx.Done():
			t.Fatalf("%s: no %s within the deadline; stderr:\n%s", argv[0], what, stderr.String())
		}
		return ""
	}
	var ready struct{ Ready uint64 }
	if err := json.Unmarshal([]byte(next("ready line")), &ready); err != nil || ready.Ready == 0 {
		t.Fatalf("ready line: %v (index %d)", err, ready.Ready)
	}
	// The script is (about to be) parked on index ready.Ready; a second
	// passing instance releases it.
	testutil.WaitFor(t, 10*time.Second, "the script's blocking query reaches the server", func() bool { return s.blocking.Load() == 1 })
	if err := s.Register(ctx, registry.Registration{Instance: registry.Instance{
		ID: service + "-2", Service: service, Address: "127.0.0.1", Port: 7777, Tags: []string{tag, "second"}}}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Registered, Deregistered bool
		PassingBefore            int      `json:"passing_before_ttl_pass"`
		TTLPass                  *bool    `json:"ttl_pass"`
		PassingAfter             int      `json:"passing_after_ttl_pass"`
		Output                   []string `json:"output"`
		Index1, Index2           uint64
		Blocked                  float64  `json:"blocked_seconds"`
		IDs                      []string `json:"ids"`
		Tags                     []string `json:"tags"`
		ServicesLeft             []string `json:"services_left"`
		Catalog                  map[string][]string
	}
	line := next("result line")
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("result %q: %v", line, err)
	}
	<-exited
	if exitErr != nil {
		t.Fatalf("script failed: %v; stderr:\n%s", exitErr, stderr.String())
	}
	t.Logf("%s saw %s", filepath.Base(argv[1]), line)
	switch {
	case !got.Registered:
		t.Error("register did not report success")
	case got.PassingBefore != 0:
		t.Errorf("before the first TTL pass %d instances were passing; a TTL check starts critical", got.PassingBefore)
	case got.TTLPass != nil && !*got.TTLPass:
		t.Error("ttl_pass did not report success")
	case got.PassingAfter != 1 || !slices.Equal(got.Output, []string{"ok from " + map[string]string{"py": "python", "js": "node"}[tag]}):
		t.Errorf("after the TTL pass: %d passing, output %q", got.PassingAfter, got.Output)
	case got.Index2 <= got.Index1:
		t.Errorf("the blocking query returned index %d, not past %d", got.Index2, got.Index1)
	case !slices.Equal(got.IDs, []string{service + "-1", service + "-2"}):
		t.Errorf("the woken query lists %v; want both instances", got.IDs)
	case !slices.Equal(got.Tags, []string{tag, "second"}):
		t.Errorf("tags %v", got.Tags)
	case got.Blocked > 9:
		t.Errorf("the blocking query ran into its 10s wait (%.1fs) instead of waking on the change", got.Blocked)
	case !got.Deregistered || !slices.Equal(got.ServicesLeft, []string{service + "-2"}):
		t.Errorf("after deregister: %v left", got.ServicesLeft)
	case !slices.Equal(got.Catalog[service], []string{tag, "second"}):
		t.Errorf("catalog %v", got.Catalog)
	}
}
