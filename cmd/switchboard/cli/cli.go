// Package cli is the switchboard command: the whole CLI (serve, validate,
// status, demo, version) behind one function, so that a program of one's
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
	"net/http"
	"os"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/demo"
	"github.com/switchboard-dev/switchboard/config"
)

const usage = `switchboard: load balancer, service registry and resilience toolkit

Usage:
  switchboard serve    --config FILE    run the proxy (reloads on SIGHUP and on file change)
  switchboard validate --config FILE    check a configuration; prints FILE:LINE:COL: problem
  switchboard status   [--admin ADDR]   show upstreams and endpoints (default 127.0.0.1:9901)
  switchboard demo                      start demo backends, the embedded registry (127.0.0.1:8500)
                                        and a proxy on 127.0.0.1:8080
  switchboard version                   print the version
`

// Main runs the switchboard command with args (os.Args[1:]) on the
// process's standard output and error, and returns the exit code: 0 on
// success, 1 when the command failed, 2 for a usage error.
func Main(args []string) int {
	return Run(context.Background(), args, os.Stdout, os.Stderr)
}

// Run is Main with its context and output given: canceling ctx stops
// serve and demo as SIGTERM does (serve drains first).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "status":
		return status(args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "switchboard", version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "switchboard: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func configFlag(fs *flag.FlagSet) *string {
	p := fs.String("config", "", "configuration `FILE`")
	fs.StringVar(p, "c", "", "configuration `FILE` (short for --config)")
	return p
}

func parse(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "switchboard %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	return true
}

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := configFlag(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "switchboard serve: --config FILE is required")
		return 2
	}
	a, err := app.New(*path, app.Options{Stderr: stderr})
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

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := configFlag(fs)
	if !parse(fs, args, stderr) {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "switchboard validate: --config FILE is required")
		return 2
	}
	if _, err := config.Load(*path); err != nil {
		printErr(stdout, "validate", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return 0
}

func status(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	addr := fs.String("admin", "127.0.0.1:9901", "admin API `ADDR`ess")
	path := configFlag(fs)
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if !parse(fs, args, stderr) {
		return 2
	}
	if *path != "" {
		cfg, err := config.Load(*path)
		if err != nil {
			printErr(stderr, "status", err)
			return 1
		}
		*addr = cfg.Admin.Listen
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + *addr + "/api/v1/upstreams")
	if err != nil {
		fmt.Fprintf(stderr, "switchboard status: cannot reach the admin API at %s: %v\n", *addr, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "switchboard status: admin API at %s answered %s: %s\n", *addr, resp.Status, body)
		return 1
	}
	if *asJSON {
		stdout.Write(body)
		return 0
	}
	var v struct {
		Upstreams []admin.UpstreamView `json:"upstreams"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		fmt.Fprintf(stderr, "switchboard status: unexpected answer from %s: %v\n", *addr, err)
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

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "the demo proxy's `ADDR`ess")
	registry := fs.String("registry", "127.0.0.1:8500", "the embedded registry's `ADDR`ess (Consul's HTTP API)")
	if !parse(fs, args, stderr) {
		return 2
	}
	if err := demo.Run(ctx, demo.Options{Listen: *listen, Registry: *registry, Stdout: stdout, Stderr: stderr}); err != nil {
		fmt.Fprintln(stderr, "switchboard demo:", err)
		return 1
	}
	return 0
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
