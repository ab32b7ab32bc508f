package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/cli"
)

func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cli.Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// The commands and the flags each must document in its help.
var commandFlags = map[string][]string{
	"serve":      {"-c, --config FILE"},
	"validate":   {"-c, --config FILE"},
	"status":     {"--admin ADDR", "-c, --config FILE", "--json"},
	"demo":       {"--port-offset N", "--listen ADDR", "--admin ADDR", "--registry ADDR", "--backends ADDR"},
	"explain":    {"--admin ADDR", "-c, --config FILE", "--json", "--listener NAME", "-X, --method METHOD", "-H, --header HEADER", "--client-ip IP"},
	"completion": nil,
	"version":    nil,
	"help":       nil,
}

func TestEveryCommandAnswersHelpWithItsFlagsAndExitsZero(t *testing.T) {
	for name, flags := range commandFlags {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}, {name, "help"}} {
			if name == "help" && args[1] == "help" {
				continue // "help help" is help's help, tried by {"help", name}
			}
			code, out, errs := run(args...)
			if code != 0 || errs != "" {
				t.Errorf("%q: exit %d, stderr %q; want 0 and nothing on stderr", args, code, errs)
				continue
			}
			if !strings.HasPrefix(out, "Usage: switchboard "+name) {
				t.Errorf("%q: help does not start with the command's usage:\n%s", args, out)
			}
			for _, f := range flags {
				if !strings.Contains(out, "  "+f+" ") {
					t.Errorf("%q: help does not list %q:\n%s", args, f, out)
				}
			}
			// Go's own listing spells flags with one dash ("  -config");
			// the docs and the help say --config.
			for _, line := range strings.Split(out, "\n") {
				short := len(line) > 8 && line[4:8] == ", --" // "  -c, --config"
				if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && !short {
					t.Errorf("%q: a flag spelled with one dash: %q", args, line)
				}
			}
		}
	}
}

func TestVersionHelpIsHelpNotTheVersion(t *testing.T) {
	_, out, _ := run("version", "--help")
	if strings.HasPrefix(out, "switchboard ") {
		t.Fatalf("version --help printed the version: %q", out)
	}
	code, out, _ := run("version")
	if code != 0 || !strings.HasPrefix(out, "switchboard ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

func TestUsageErrorsExitTwoOnStderr(t *testing.T) {
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"serve"}, "--config FILE is required"},
		{[]string{"serve", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"validate", "extra"}, `unexpected argument "extra"`},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"completion"}, "give one shell: bash, zsh or fish"},
		{[]string{"completion", "tcsh"}, "give one shell: bash, zsh or fish"},
		{[]string{"demo", "--port-offset", "-1"}, "--port-offset -1: want 0-50000"},
		{[]string{"demo", "--backends", "127.0.0.1:1,127.0.0.1:2"}, "want three comma-separated addresses"},
	} {
		code, out, errs := run(c.args...)
		if code != 2 || out != "" || !strings.Contains(errs, c.say) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and stderr saying %q", c.args, code, out, errs, c.say)
		}
	}
}

func TestInvocationIsWhatTheUserTyped(t *testing.T) {
	if got := cli.Invocation("/tmp/go-build123/b001/exe/switchboard"); got != "go run ./cmd/switchboard" {
		t.Errorf("under go run: %q", got)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "switchboard")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got := cli.Invocation(bin); got != "switchboard" {
		t.Errorf("found on PATH: %q, want switchboard", got)
	}
	other := filepath.Join(t.TempDir(), "switchboard")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := cli.Invocation(other); got != other {
		t.Errorf("another file of the same name on PATH: %q, want the path %q", got, other)
	}
}

// completionScript writes the script of shell to a file.
func completionScript(t *testing.T, shell string) string {
	code, out, errs := run("completion", shell)
	if code != 0 || errs != "" {
		t.Fatalf("completion %s: exit %d, %s", shell, code, errs)
	}
	p := filepath.Join(t.TempDir(), "switchboard."+shell)
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// needShell finds a shell; scripts/test.sh installs them, so CI runs these.
func needShell(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (scripts/test.sh installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// The cases every shell's completion must answer: the words typed so
// far (the last one being completed) and the candidates wanted.
var completionCases = []struct {
	line string
	want []string
}{
	{"switchboard se", []string{"serve"}},
	{"switchboard v", []string{"validate", "version"}},
	{"switchboard serve --c", []string{"--config"}},
	{"switchboard status --j", []string{"--json"}},
	{"switchboard demo --port", []string{"--port-offset"}},
	{"switchboard completion ", []string{"bash", "fish", "zsh"}},
}

func TestBashCompletion(t *testing.T) {
	bash := needShell(t, "bash")
	script := completionScript(t, "bash")
	for _, c := range completionCases {
		words := strings.Split(c.line, " ")
		var arr []string
		for _, w := range words {
			arr = append(arr, "'"+w+"'")
		}
		prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(arr, " ") + ")\nCOMP_CWORD=" +
			itoa(len(words)-1) + "\n_switchboard\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.line, err, out)
		}
		if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("bash %q: %q, want %q", c.line, got, c.want)
		}
	}
}

// A flag that takes a file completes file names; one that takes an
// address completes nothing.
func TestBashCompletionOfFlagValues(t *testing.T) {
	bash := needShell(t, "bash")
	script := completionScript(t, "bash")
	dir := t.TempDir()
	for _, f := range []string{"edge.yaml", "edge.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		words string
		want  string
	}{
		{"'switchboard' 'serve' '--config' 'edge.y'", "edge.yaml"},
		{"'switchboard' 'validate' '-c' 'ed'", "edge.json edge.yaml"},
		{"'switchboard' 'status' '--admin' ''", ""},
	} {
		prog := "cd " + dir + "\nsource " + script + "\nCOMP_WORDS=(" + c.words + ")\nCOMP_CWORD=3\n_switchboard\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.words, err, out)
		}
		got := strings.Fields(string(out))
		sort.Strings(got)
		if strings.Join(got, " ") != c.want {
			t.Errorf("bash %s: %q, want %q", c.words, got, c.want)
		}
	}
}

func TestFishCompletion(t *testing.T) {
	fish := needShell(t, "fish")
	script := completionScript(t, "fish")
	for _, c := range completionCases {
		out, err := exec.Command(fish, "--no-config", "-c", "source "+script+"; complete -C'"+c.line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.line, err, out)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if w, _, _ := strings.Cut(line, "\t"); w != "" {
				got = append(got, w)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("fish %q: %q, want %q", c.line, got, c.want)
		}
	}
}

// zsh's completion system needs a terminal to run; the script is checked
// by zsh's parser, and for the commands and flags it must offer.
func TestZshCompletionParsesAndOffersEveryCommand(t *testing.T) {
	zsh := needShell(t, "zsh")
	script := completionScript(t, "zsh")
	if out, err := exec.Command(zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(script)
	for name, flags := range commandFlags {
		if !strings.Contains(string(b), "'"+name+":") || !strings.Contains(string(b), "    "+name+")") {
			t.Errorf("zsh script does not offer %s", name)
		}
		for _, f := range flags {
			long := strings.Fields(f[strings.Index(f, "--"):])[0]
			if !strings.Contains(string(b), long+"[") && !strings.Contains(string(b), long+"}") {
				t.Errorf("zsh script does not offer %s %s", name, long)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
