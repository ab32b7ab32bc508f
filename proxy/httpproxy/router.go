package httpproxy

import (
	"net/http"
	"net/netip"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/internal/pshard"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// Table is one listener's routes, swapped whole on reload; a request keeps
// the table it started with.
type Table struct {
	listener  string
	routes    []*route
	accessLog bool
	maxBody   int64
	idle      time.Duration // bounds an idle protocol-switch tunnel
	noRoute   *httpmetrics.Route
	front     *frontPolicy // HSTS, client certificate header, redirect_https; nil: none
	tracer    *Tracer      // nil: tracing off (Change.Trace)
	// active counts requests being served on this table, so that the
	// series its requests count on outlive a reload while they run. A
	// pointer: the record of a replaced table keeps it, not the table.
	active *activity

	// trusted are the listener's trusted_proxies.
	trusted []netip.Prefix
}

// route is one entry of a table: a matcher and the pipeline it feeds.
type route struct {
	name     string
	host     string // lower-case; "" matches any
	wildcard bool   // host was "*.example.com": host holds ".example.com"
	prefix   string
	methods  []string
	headers  [][2]string   // canonical name, exact value
	buffer   *bufferPolicy // nil: bodies are streamed
	timeout  time.Duration // the route's, which buffering counts against

	compress *compressPolicy // nil: responses go as they come
	// target is the route's own upstream (its split's first member): its
	// pipeline, series and sticky cookie.
	target
	traffic *traffic // split, canary, mirror; nil: none
	// access is the route's access control; nil: none.
	access   *accessControl
	rewrite  *rewriter // nil: none (rewrite.go)
	redirect *redirect // non-nil: the route redirects; pipe is nil
}

// NewTable builds the routing table of listener lc; pipes gives each
// route's pipeline by route name (every route of lc must have one).
func NewTable(lc *config.Listener, pipes func(route string) *pipeline.Route, m *Metrics) *Table {
	t := &Table{
		listener:  lc.Name,
		accessLog: lc.AccessLog,
		maxBody:   int64(lc.MaxBodyBytes),
		idle:      lc.Timeouts.Idle.Std(),
		noRoute:   m.Route(lc.Name, "", ""),
		active:    newActivity(),
		front:     frontPolicyOf(lc),
		trusted:   trustedProxies(lc.TrustedProxies),
	}
	for _, rc := range lc.Routes {
		rt := &route{name: rc.Name, prefix: rc.Match.PathPrefix}
		rt.pipe = pipes(rc.Name)
		if rc.Timeout != nil {
			rt.timeout = rc.Timeout.Std()
		}
		if b := rc.BufferRequests; b != nil {
			rt.buffer = &bufferPolicy{memory: int64(b.Memory), max: int64(b.Max), dir: b.Dir}
		}
		if rc.Compress != nil || rc.Decompress {
			rt.compress = newCompressPolicy(&rc, func(algorithm, mode string) *httpmetrics.Coding {
				return m.Coding(lc.Name, rc.Name, rc.Upstream, algorithm, mode)
			})
		}
		if h := strings.ToLower(rc.Match.Host); strings.HasPrefix(h, "*.") {
			rt.host, rt.wildcard = h[1:], true
		} else {
			rt.host = h
		}
		if len(rc.Match.Methods) > 0 {
			rt.methods = rc.Match.Methods
		}
		names := make([]string, 0, len(rc.Match.Headers))
		for k := range rc.Match.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			rt.headers = append(rt.headers, [2]string{http.CanonicalHeaderKey(k), rc.Match.Headers[k]})
		}
		rt.rewrite, rt.redirect = newRewriter(&rc), newRedirect(rc.Redirect)
		upName := "" // a redirect's
		if ups := rc.Upstreams(); len(ups) > 0 {
			upName = ups[0]
		}
		rt.metrics = m.Route(lc.Name, rc.Name, upName)
		rt.access = newAccessControl(&rc)
		t.routes = append(t.routes, rt)
	}
	return t
}

// Series calls fn with the labels of every series the table's requests
// count on: its listener and each (route, upstream), the no-route series
// ("", "") included.
func (t *Table) Series(fn func(listener, route, upstream string)) {
	fn(t.noRoute.Labels())
	for _, rt := range t.routes {
		fn(rt.metrics.Labels())
		if rt.traffic != nil {
			rt.traffic.series(rt, fn)
		}
	}
}

func (t *Table) match(r *http.Request) *route {
	var host string
	for _, rt := range t.routes {
		if m, _ := rt.test(r, &host); m == matched {
			return rt
		}
	}
	return nil
}

// miss is the first condition of a route that a request fails.
type miss uint8

const (
	matched miss = iota
	missHost
	missPath
	missMethod
	missHeader
)

// test reports whether r matches rt, or the first condition it fails
// (and for missHeader the index of the header in rt.headers). host is the
// request's host (requestHost), found on first need and kept for the next
// route. match routes with it; explain tells the reasons from it.
func (rt *route) test(r *http.Request, host *string) (miss, int) {
	if rt.host != "" {
		if *host == "" {
			*host = requestHost(r)
		}
		if rt.wildcard {
			if !strings.HasSuffix(*host, rt.host) || len(*host) == len(rt.host) {
				return missHost, 0
			}
		} else if *host != rt.host {
			return missHost, 0
		}
	}
	if !strings.HasPrefix(r.URL.Path, rt.prefix) {
		return missPath, 0
	}
	if rt.methods != nil && !contains(rt.methods, r.Method) && !rt.preflightMatches(r) {
		return missMethod, 0
	}
	for i, h := range rt.headers {
		if v := r.Header[h[0]]; len(v) == 0 || v[0] != h[1] {
			return missHeader, i
		}
	}
	return matched, 0
}

// requestHost is the request's host without port, lower-cased.
func requestHost(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// activity counts the requests being served on a table. Every request
// adds to it on whichever CPU serves it, so it keeps its counts per CPU
// (pshard), as the request metrics do: one shared word would move between
// the event loops' caches twice a request. The counts are of starts and
// of ends, each only growing, because a sum of per-CPU steps (+1 on one
// CPU, -1 on another) read shard by shard while requests start and end
// could come to 0 with a request still running; idle reads the ends first.
type activity struct{ started, ended pshard.Int }

func newActivity() *activity {
	n := pshard.Count(runtime.GOMAXPROCS(0), 16)
	return &activity{started: pshard.NewInt(n), ended: pshard.NewInt(n)}
}

func (a *activity) begin() { a.started.Add(1) }

func (a *activity) end() { a.ended.Add(1) }

// idle reports whether no request was being served at some moment during
// the call: every request that had ended by then (its end counted) had
// started before, so its start is in the count read after.
func (a *activity) idle() bool {
	ended := a.ended.Load()
	return a.started.Load() == ended
}
