// Package cli is the switchboard command: the whole CLI (serve, validate,
// status, demo, explain, completion, version, help) behind one function, so that a program of one's
// own can add to switchboard before running it. cmd/switchboard's main is
// just os.Exit(cli.Main(os.Args[1:])).
//
// The reason to write such a program is a balancing policy of one's own:
// register it with balance.Register, then hand over to Main, and the
// configuration file can name it (balance: {policy: NAME}):
//
//	func main() {
//		balance.Register("primary_backup", newPrimaryBackup)
//		os.Exit(cli.Main(os.Args[1:]))
//	}
//
// docs/balancing.md ("Your own policy") walks through it.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/demo"
	"github.com/switchboard-dev/switchboard/config"
)

// command is one subcommand: how it is called, what it does, its flags
// and how it runs. The usage text, each command's --help and the shell
// completions are all made from this one table.
type command struct {
	name    string
	args    string // the synopsis after the name
	summary string // one line, for the command list
	about   string // a paragraph, for the command's --help
	flags   func(fs *flag.FlagSet)
	run     func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int
}

// commands is every subcommand, in the order the usage lists them; set in
// init, since help and completion read it.
var commands []*command

func init() {
	commands = []*command{
		{name: "serve", args: "--config FILE", summary: "run the proxy (reloads on SIGHUP and on file change)",
			about: "Runs the listeners, upstreams, admin API and embedded registry of a configuration file.\n" +
				"It reloads the file on SIGHUP and when the file changes; a bad file is refused and the\n" +
				"running configuration kept. SIGTERM or SIGINT drains in-flight requests, then stops.",
			flags: func(fs *flag.FlagSet) { configFlag(fs) }, run: serve},
		{name: "validate", args: "--config FILE", summary: "check a configuration; prints FILE:LINE:COL: problem",
			about: "Loads and checks a configuration file as serve would, without starting anything.\n" +
				"Prints FILE: ok, or one FILE:LINE:COL: problem per line and exits 1.",
			flags: func(fs *flag.FlagSet) { configFlag(fs) }, run: validate},
		{name: "status", args: "[--admin ADDR | --config FILE] [--json]", summary: "show upstreams and endpoints (default admin 127.0.0.1:9901)",
			about: "Asks a running switchboard's admin API for its upstreams and prints every endpoint\n" +
				"with its state, the reason for it, and its traffic.",
			flags: statusFlags, run: status},
		{name: "demo", args: "[--port-offset N] [--listen ADDR] ...", summary: "start demo backends, the embedded registry (127.0.0.1:8500) and a proxy on 127.0.0.1:8080",
			about: "Starts three demo backends that register with the embedded registry the way any\n" +
				"service would (with the official Consul client), and a proxy routing to them by the\n" +
				"registry's urlprefix- tags. Everything stops on Ctrl-C. --port-offset N moves every\n" +
				"default port by N, for a machine where they are taken.",
			flags: demoFlags, run: runDemo},
		explainCommand,
		{name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script",
			about: "Prints the completion script of a shell. For example:\n" +
				"  bash: source <(switchboard completion bash)   (or save it in /etc/bash_completion.d/switchboard)\n" +
				"  zsh:  switchboard completion zsh > \"${fpath[1]}/_switchboard\"\n" +
				"  fish: switchboard completion fish > ~/.config/fish/completions/switchboard.fish",
			run: completion},
		{name: "version", summary: "print the version",
			about: "Prints the version and the source revision this binary was built from.",
			run: func(_ context.Context, _ *flag.FlagSet, stdout, _ io.Writer) int {
				fmt.Fprintln(stdout, "switchboard", version())
				return 0
			}},
		{name: "help", args: "[COMMAND]", summary: "show this help, or a command's",
			about: "Shows the list of commands, or the help of one command (as COMMAND --help does).",
			run:   help},
	}
}

// takesArgs lists the commands with positional arguments; the others
// refuse any.
var takesArgs = map[string]bool{"completion": true, "help": true, "explain": true}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func usage() string {
	var b strings.Builder
	b.WriteString("switchboard: load balancer, service registry and resilience toolkit\n\nUsage:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace("switchboard "+c.name+" "+c.args), c.summary)
	}
	tw.Flush()
	b.WriteString("\nRun 'switchboard COMMAND --help' for a command's flags.\n")
	return b.String()
}

// newFlagSet is command c's flag set, its usage being c's help.
func (c *command) newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {} // Run prints the help, or a hint after a bad flag
	return fs
}

// printHelp writes c's help: synopsis, description and flags, spelled
// --flag as the docs spell them (Go's flag package takes one dash or two).
func (c *command) printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", strings.TrimSpace("switchboard "+c.name+" "+c.args), c.about)
	lines := flagLines(fs)
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintf(tw, "  %s\t%s\n", l[0], l[1])
	}
	tw.Flush()
}

// shortFor marks a one-letter flag that stands for a long one.
const shortFor = "short for --"

// flagLines are fs's flags as (spelling, description) pairs: "-c, --config
// FILE" for a long flag with a short one, and the default when it is not
// the zero value.
func flagLines(fs *flag.FlagSet) [][2]string {
	shorts := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := strings.CutPrefix(f.Usage, shortFor); ok {
			shorts[long] = f.Name
		}
	})
	var out [][2]string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, shortFor) {
			return
		}
		arg, desc := flag.UnquoteUsage(f)
		spell := "--" + f.Name
		if arg != "" {
			spell += " " + arg
		}
		if s, ok := shorts[f.Name]; ok {
			spell = "-" + s + ", " + spell
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			desc += " (default " + f.DefValue + ")"
		}
		out = append(out, [2]string{spell, desc})
	})
	return out
}

// Main runs the switchboard command with args (os.Args[1:]) on the
// process's standard output and error, and returns the exit code: 0 on
// success, 1 when the command failed, 2 for a usage error.
//
// Main owns the process, so it also sets GOMAXPROCS: one more than Go's
// default (the CPUs the process may use), unless the GOMAXPROCS
// environment variable says otherwise. The event-loop engines run
// GOMAXPROCS-1 loops (evloop.DefaultLoops), which makes a loop per CPU
// and leaves a processor to the rest (admin, metrics, health checks, the
// goroutine engine, the collector). On 2 CPUs two loops served 1.02-1.07x
// the requests of two loops with GOMAXPROCS 2, and 1.15x those of one
// loop (docs/BENCHMARKS.md, "a loop per CPU, no allocation, sharded histograms").
func Main(args []string) int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	}
	return Run(context.Background(), args, os.Stdout, os.Stderr)
}

// Run is Main with its context and output given: canceling ctx stops
// serve and demo as SIGTERM does (serve drains first).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	case "--version", "-version":
		name = "version"
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "switchboard: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	fs := c.newFlagSet()
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(stdout, fs)
			return 0
		}
		// The flag package has said what is wrong.
		fmt.Fprintf(stderr, "see switchboard %s --help\n", c.name)
		return 2
	}
	if fs.NArg() == 1 && fs.Arg(0) == "help" {
		c.printHelp(stdout, fs)
		return 0
	}
	if !takesArgs[c.name] && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "switchboard %s: unexpected argument %q (see switchboard %s --help)\n", c.name, fs.Arg(0), c.name)
		return 2
	}
	return c.run(ctx, fs, stdout, stderr)
}

func help(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	switch fs.NArg() {
	case 0:
		fmt.Fprint(stdout, usage())
		return 0
	case 1:
		c := lookup(fs.Arg(0))
		if c == nil {
			fmt.Fprintf(stderr, "switchboard help: unknown command %q\n\n%s", fs.Arg(0), usage())
			return 2
		}
		c.printHelp(stdout, c.newFlagSet())
		return 0
	}
	fmt.Fprintln(stderr, "switchboard help: give one command at most")
	return 2
}

func configFlag(fs *flag.FlagSet) {
	p := fs.String("config", "", "configuration `FILE`")
	fs.StringVar(p, "c", "", shortFor+"config")
}

// flagString is the value of fs's string flag name.
func flagString(fs *flag.FlagSet, name string) string { return fs.Lookup(name).Value.String() }

func serve(ctx context.Context, fs *flag.FlagSet, _, stderr io.Writer) int {
	path := flagString(fs, "config")
	if path == "" {
		fmt.Fprintln(stderr, "switchboard serve: --config FILE is required (see switchboard serve --help)")
		return 2
	}
	a, err := app.New(path, app.Options{Stderr: stderr})
	if err != nil {
		printErr(stderr, "serve", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "switchboard serve:", err)
		return 1
	}
	return 0
}

func printErr(stderr io.Writer, cmd string, err error) {
	var probs config.Errors
	if errors.As(err, &probs) {
		for _, p := range probs {
			fmt.Fprintln(stderr, p.String())
		}
		return
	}
	fmt.Fprintf(stderr, "switchboard %s: %v\n", cmd, err)
}

func validate(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	path := flagString(fs, "config")
	if path == "" {
		fmt.Fprintln(stderr, "switchboard validate: --config FILE is required (see switchboard validate --help)")
		return 2
	}
	if _, err := config.Load(path); err != nil {
		printErr(stdout, "validate", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return 0
}

func statusFlags(fs *flag.FlagSet) {
	fs.String("admin", "127.0.0.1:9901", "the admin API's `ADDR`ess")
	configFlag(fs)
	fs.Bool("json", false, "print the admin API's JSON as it is")
}

// adminAddr is the admin API's address that command cmd was given:
// --admin, or admin.listen of --config's file. ok is false when that file
// could not be loaded (its problems are printed).
func adminAddr(fs *flag.FlagSet, cmd string, stderr io.Writer) (addr string, ok bool) {
	addr = flagString(fs, "admin")
	if path := flagString(fs, "config"); path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			printErr(stderr, cmd, err)
			return "", false
		}
		addr = cfg.Admin.Listen
	}
	return addr, true
}

func status(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	addr, ok := adminAddr(fs, "status", stderr)
	if !ok {
		return 1
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/api/v1/upstreams")
	if err != nil {
		fmt.Fprintf(stderr, "switchboard status: cannot reach the admin API at %s: %v\n", addr, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "switchboard status: admin API at %s answered %s: %s\n", addr, resp.Status, body)
		return 1
	}
	if flagString(fs, "json") == "true" {
		stdout.Write(body)
		return 0
	}
	var v struct {
		Upstreams []admin.UpstreamView `json:"upstreams"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		fmt.Fprintf(stderr, "switchboard status: unexpected answer from %s: %v\n", addr, err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tPOLICY\tENDPOINT\tWEIGHT\tSTATE\tIN-FLIGHT\tREQUESTS\tFAILURES\tREASON")
	for _, u := range v.Upstreams {
		for _, e := range u.Endpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s (since %s)\n", u.Name, u.Policy, e.Address, e.Weight, e.State, e.InFlight, e.Requests, e.Failures, e.Reason, e.Since.Format(time.TimeOnly))
		}
		if len(u.Endpoints) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\tno endpoints\n", u.Name, u.Policy)
		}
	}
	tw.Flush()
	return 0
}

func demoFlags(fs *flag.FlagSet) {
	fs.Int("port-offset", 0, "add `N` to every default port below (8080+N, 9901+N, ...)")
	fs.String("listen", "", "the demo proxy's `ADDR`ess (default 127.0.0.1:8080)")
	fs.String("admin", "", "the admin API's `ADDR`ess (default 127.0.0.1:9901)")
	fs.String("registry", "", "the embedded registry's `ADDR`ess, Consul's HTTP API (default 127.0.0.1:8500)")
	fs.String("backends", "", "the three demo backends' `ADDR`esses, comma-separated (default 127.0.0.1:9001-9003)")
}

func runDemo(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	off, _ := strconv.Atoi(flagString(fs, "port-offset"))
	if off < 0 || off > 50000 {
		fmt.Fprintf(stderr, "switchboard demo: --port-offset %d: want 0-50000, so that every port stays under 65536\n", off)
		return 2
	}
	at := func(flagName string, port int) string {
		if v := flagString(fs, flagName); v != "" {
			return v
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port+off))
	}
	opt := demo.Options{
		Listen: at("listen", 8080), Admin: at("admin", 9901), Registry: at("registry", 8500),
		Command: Invocation(os.Args[0]), Stdout: stdout, Stderr: stderr,
	}
	if v := flagString(fs, "backends"); v != "" {
		opt.Backends = strings.Split(v, ",")
		if len(opt.Backends) != 3 {
			fmt.Fprintf(stderr, "switchboard demo: --backends %q: want three comma-separated addresses\n", v)
			return 2
		}
	} else {
		for i := 1; i <= 3; i++ {
			opt.Backends = append(opt.Backends, net.JoinHostPort("127.0.0.1", strconv.Itoa(9000+i+off)))
		}
	}
	if err := demo.Run(ctx, opt); err != nil {
		fmt.Fprintln(stderr, "switchboard demo:", err)
		return 1
	}
	return 0
}

// Invocation is how the user ran this program, to repeat in hints: the
// program's name when the shell finds this very file by it on PATH,
// "go run ./cmd/switchboard" under go run (whose binary lives in a
// temporary build directory), otherwise the path as it was typed.
func Invocation(arg0 string) string {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/switchboard"
	}
	base := filepath.Base(arg0)
	if found, err := exec.LookPath(base); err == nil && sameFile(found, arg0) {
		return base
	}
	return arg0
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
		return v
	}
	return "(unknown)"
}
