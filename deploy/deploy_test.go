// Package deploy_test checks what deploy/ ships: that the systemd unit
// passes systemd-analyze, that deploy/build.sh (the Dockerfile's build
// step) builds a binary that runs and accepts the shipped configuration,
// and that the Dockerfile builds by no other step.
package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtDir  string
	buildOut  string
	buildErr  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// need finds a program; scripts/test.sh installs what CI needs.
func need(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// build runs deploy/build.sh into a temporary directory once per test
// binary and returns it.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchboard-deploy-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		builtDir = dir
		out, err := exec.Command("./build.sh", dir).CombinedOutput()
		if err != nil {
			buildErr = string(out) + err.Error()
		}
		buildOut = string(out)
	})
	if buildErr != "" {
		t.Fatalf("deploy/build.sh: %s", buildErr)
	}
	return builtDir
}

func TestBuildScriptMakesTheInstallableTree(t *testing.T) {
	dir := build(t)
	bin := filepath.Join(dir, "usr/local/bin/switchboard")
	if !strings.Contains(buildOut, "switchboard ") || !strings.Contains(buildOut, "switchboard.yaml: ok") {
		t.Fatalf("build.sh did not run the binary and validate the configuration:\n%s", buildOut)
	}
	for _, p := range []string{"etc/switchboard/switchboard.yaml", "var/lib/switchboard"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("the tree lacks %s: %v", p, err)
		}
	}
	// Static: the image's base has no Go toolchain and may lack libc.
	if out, err := exec.Command("file", bin).CombinedOutput(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("the binary is not static: %s", out)
	}
}

// The Dockerfile's RUN steps are exactly the ones deploy/build.sh and
// this test run: a step added to one and not the other fails here.
func TestDockerfileBuildsOnlyThroughTheTestedScript(t *testing.T) {
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	allowed := map[string]bool{"go mod download": true, "deploy/build.sh /out": true}
	var runs []string
	var froms int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "RUN "):
			runs = append(runs, strings.TrimPrefix(line, "RUN "))
		case strings.HasPrefix(line, "FROM "):
			froms++
		case strings.HasPrefix(line, "COPY --from=build"):
			if !strings.Contains(line, "/out/") {
				t.Errorf("the image copies something other than build.sh's tree: %q", line)
			}
		}
	}
	for _, r := range runs {
		if !allowed[r] {
			t.Errorf("the Dockerfile runs %q, which deploy/build.sh does not do and no test runs", r)
		}
	}
	if len(runs) != len(allowed) || froms != 2 {
		t.Errorf("want the two RUN steps %v in a two-stage build; have %q in %d stages", allowed, runs, froms)
	}
}

// systemd-analyze verify checks the unit's syntax, its directives and its
// commands; the binary path is pointed at the one build.sh made.
func TestSystemdUnitVerifies(t *testing.T) {
	sa := need(t, "systemd-analyze")
	dir := build(t)
	unit, err := os.ReadFile("switchboard.service")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "usr/local/bin/switchboard")
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/switchboard", bin)
	if !strings.Contains(text, "\nExecStartPre="+bin+" validate") || !strings.Contains(text, "\nExecStart="+bin+" serve") {
		t.Fatalf("the unit should start serve after validate, both from /usr/local/bin/switchboard")
	}
	p := filepath.Join(t.TempDir(), "switchboard.service")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The commands it runs are the CLI's.
	for _, cmd := range []string{"validate --config /etc/switchboard/switchboard.yaml", "serve --config /etc/switchboard/switchboard.yaml"} {
		if !strings.Contains(string(unit), "/usr/local/bin/switchboard "+cmd) {
			t.Errorf("the unit does not run switchboard %s", cmd)
		}
	}
}
