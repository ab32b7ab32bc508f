package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
)

// explainCommand is switchboard explain, an entry of commands.
var explainCommand = &command{
	name: "explain", args: "[-X METHOD] [-H 'Name: Value']... URL-or-path",
	summary: "say which route, upstream and endpoints a request would get, and why",
	about: "Asks a running switchboard's admin API (GET /api/v1/explain) how it would handle a request,\n" +
		"without sending it: which route matches and why each earlier one does not, the upstream and\n" +
		"its policy, which endpoints it picks from now and why each other one is out, and what the\n" +
		"route's rate limits, concurrency limits and breaker would decide (nothing is counted).\n" +
		"The request is a URL (http://api.example.com/orders/1: the host is taken from it) or a\n" +
		"path (/orders/1, with -H 'Host: api.example.com' for a host).",
	flags: explainFlags, run: explain,
}

// headerFlag collects repeated -H values.
type headerFlag []string

func (h *headerFlag) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlag) Set(v string) error { *h = append(*h, v); return nil }

func explainFlags(fs *flag.FlagSet) {
	statusFlags(fs)
	fs.String("listener", "", "the http listener's `NAME` (default the first one)")
	m := fs.String("method", "GET", "the request's `METHOD`")
	fs.StringVar(m, "X", "GET", shortFor+"method")
	h := &headerFlag{}
	fs.Var(h, "header", "a request `HEADER`, 'Name: Value'; repeatable")
	fs.Var(h, "H", shortFor+"header")
	fs.String("client-ip", "", "the client's `IP` address, for rate limits keyed by client_ip")
}

func explain(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	// Flags may follow the URL too, as with curl.
	var target string
	for fs.NArg() > 0 {
		if target != "" {
			fmt.Fprintf(stderr, "switchboard explain: one URL or path, got %q and %q (see switchboard explain --help)\n", target, fs.Arg(0))
			return 2
		}
		target = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			fmt.Fprintln(stderr, "see switchboard explain --help")
			return 2
		}
	}
	if target == "" {
		fmt.Fprintln(stderr, "switchboard explain: give the request's URL or path (see switchboard explain --help)")
		return 2
	}
	q := url.Values{}
	if l := flagString(fs, "listener"); l != "" {
		q.Set("listener", l)
	}
	q.Set("method", strings.ToUpper(flagString(fs, "method")))
	if strings.HasPrefix(target, "/") {
		q.Set("path", target)
	} else {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(stderr, "switchboard explain: %q is neither a path (/orders/1) nor an http(s) URL\n", target)
			return 2
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		q.Set("host", u.Host)
		q.Set("path", path)
	}
	for _, h := range *fs.Lookup("header").Value.(*headerFlag) {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			fmt.Fprintf(stderr, "switchboard explain: -H %q: want 'Name: Value'\n", h)
			return 2
		}
		if strings.EqualFold(strings.TrimSpace(name), "Host") {
			q.Set("host", strings.TrimSpace(value))
			continue
		}
		q.Add("header", h)
	}
	if ip := flagString(fs, "client-ip"); ip != "" {
		q.Set("client_ip", ip)
	}

	addr, ok := adminAddr(fs, "explain", stderr)
	if !ok {
		return 1
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/api/v1/explain?" + q.Encode())
	if err != nil {
		fmt.Fprintf(stderr, "switchboard explain: cannot reach the admin API at %s: %v\n", addr, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		fmt.Fprintf(stderr, "switchboard explain: reading the admin API's answer: %v\n", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			fmt.Fprintf(stderr, "switchboard explain: %s\n", e.Error)
		} else {
			fmt.Fprintf(stderr, "switchboard explain: admin API at %s answered %s: %s\n", addr, resp.Status, body)
		}
		return 1
	}
	if flagString(fs, "json") == "true" {
		stdout.Write(body)
		return 0
	}
	var e plane.Explanation
	if err := json.Unmarshal(body, &e); err != nil {
		fmt.Fprintf(stderr, "switchboard explain: unexpected answer from %s: %v\n", addr, err)
		return 1
	}
	printExplanation(stdout, &e)
	return 0
}

// printExplanation writes e for a reader: the request, the routes tried,
// the upstream's endpoints, the limits, and the decision last.
func printExplanation(w io.Writer, e *plane.Explanation) {
	rt := &e.Routing
	fmt.Fprintf(w, "Request: %s %s%s on listener %s\n", rt.Method, rt.Host, rt.Path, rt.Listener)
	if rt.NormalizedFrom != "" {
		fmt.Fprintf(w, "  (path normalised from %s)\n", rt.NormalizedFrom)
	}
	if len(rt.Routes) > 0 {
		fmt.Fprintln(w, "\nRoutes, in order:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range rt.Routes {
			if r.Matched {
				fmt.Fprintf(tw, "  match\t%s\n", r.Route)
			} else {
				fmt.Fprintf(tw, "  no\t%s\t%s\n", r.Route, r.Reason)
			}
		}
		tw.Flush()
	}
	if u := e.Upstream; u != nil {
		fmt.Fprintf(w, "\nUpstream %s, policy %s: %d of %d endpoints eligible", u.Name, u.Policy, u.Eligible, u.Total)
		if u.Panic {
			fmt.Fprint(w, " (panic mode: all of them)")
		}
		fmt.Fprintln(w)
		if u.HashKey != "" {
			if u.HashKeyFound {
				fmt.Fprintf(w, "  hash key %s = %q", u.HashKey, u.HashKeyValue)
				if u.HashesTo != "" {
					fmt.Fprintf(w, ": kept on %s", u.HashesTo)
				}
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, "  hash key %s: not in the request\n", u.HashKey)
			}
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, ep := range u.Endpoints {
			verdict := "eligible"
			if !ep.Eligible {
				verdict = "out" // the state says why; the reason says more
				if ep.Reason != "" {
					verdict += ": " + ep.Reason
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", ep.Address, ep.State, verdict)
		}
		tw.Flush()
	}
	if d := e.Limits; d != nil {
		if len(d.RateLimits) > 0 {
			fmt.Fprintln(w, "\nRate limits:")
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			for _, l := range d.RateLimits {
				key := l.Key
				if l.KeyFound {
					key += "=" + fmt.Sprintf("%q", l.KeyValue)
				}
				verdict := ""
				switch {
				case !l.Peeked:
					verdict = l.Note
				case l.Allowed && l.Delay != "":
					verdict = fmt.Sprintf("allowed after a wait of %s", l.Delay)
				case l.Allowed:
					verdict = fmt.Sprintf("allowed (%d of %d left after it)", l.Remaining, l.Limit)
				default:
					verdict = "refused, retry after " + l.RetryIn
				}
				fmt.Fprintf(tw, "  %s\t%s %s\tkey %s\t%s\n", l.Name, l.Algorithm, l.Rate, key, verdict)
			}
			tw.Flush()
		}
		for _, c := range d.Concurrency {
			fmt.Fprintf(w, "\nConcurrency (%s): %d of %d in flight, %d of %d queued: would %s\n", c.Scope, c.InFlight, c.MaxInFlight, c.Queued, c.Queue, c.Would)
		}
		if b := d.Breaker; b != nil {
			fmt.Fprintf(w, "\nBreaker: %s", b.State)
			switch {
			case b.HalfOpenIn != "":
				fmt.Fprintf(w, ", refusing; probes in %s\n", b.HalfOpenIn)
			case b.Allowed:
				fmt.Fprintln(w, ", lets it through")
			default:
				fmt.Fprintln(w, ", refusing")
			}
		}
	}
	fmt.Fprintf(w, "\nDecision: %s\n", e.Decision)
}
