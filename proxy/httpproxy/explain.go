package httpproxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/pipeline"
)

// Routing is how a listener routes one request, for GET /api/v1/explain:
// the request as the routes see it (its path normalised first, as the
// proxy does), every route tried in order with the reason each one before
// the match did not match, and the route that does.
type Routing struct {
	Listener string `json:"listener"`
	Method   string `json:"method"`
	// Host is the host the routes compare: lower-case, without port.
	Host string `json:"host"`
	// Path is the path the routes compare, after normalisation.
	Path string `json:"path"`
	// NormalizedFrom is the path as given, when normalisation changed it.
	NormalizedFrom string `json:"normalized_from,omitempty"`
	// Status is what the proxy answers without forwarding: 400 for a
	// path that climbs above the root or is malformed, 404 when no route
	// matches; 0 when a route matches.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// Routes are the routes tried, in order, up to and including the one
	// that matches.
	Routes []RouteCheck `json:"routes"`
	// Route is the matching route's name, "" for none.
	Route string `json:"route,omitempty"`
	// Pipeline is the matching route's pipeline, nil for none (or a
	// route that redirects: Status says so).
	Pipeline *pipeline.Route `json:"-"`
	// Split describes the matching route's traffic split, "" for none:
	// its members and weights, and which one this request was given
	// (a weighted choice without split_sticky is random per request).
	Split string `json:"split,omitempty"`
}

// RouteCheck is one route's verdict on the request.
type RouteCheck struct {
	Route   string `json:"route"`
	Matched bool   `json:"matched"`
	// Reason is why the route does not match: the first of its conditions
	// the request fails, in the order the router checks them (host, path
	// prefix, method, headers).
	Reason string `json:"reason,omitempty"`
}

// Explain routes r on the running table of the named http listener as
// ServeHTTP would (normalising its path first, which may change r), and
// says why. ok is false when there is no such http listener. It forwards
// nothing and counts nothing.
func (s *Server) Explain(listener string, r *http.Request) (rt Routing, ok bool) {
	s.mu.Lock()
	l := s.listeners[listener]
	s.mu.Unlock()
	if l == nil {
		return Routing{}, false
	}
	return l.handler.tbl.Load().explain(r), true
}

// explain is match with reasons: the same test per route, so that what it
// says is what the router does.
func (t *Table) explain(r *http.Request) Routing {
	res := Routing{Listener: t.listener, Method: r.Method, Routes: []RouteCheck{}}
	given := r.URL.EscapedPath()
	if r.RequestURI != "" && r.RequestURI[0] == '/' {
		given, _, _ = strings.Cut(r.RequestURI, "?")
	}
	if !normalizeRequest(r) {
		res.Host, res.Path = requestHost(r), given
		res.Status, res.Error = http.StatusBadRequest, "request path climbs above the root or is malformed: the proxy answers 400 "+pipeline.CodeBadRequest+" before routing"
		return res
	}
	host := requestHost(r)
	res.Host, res.Path = host, r.URL.Path
	if norm := r.URL.EscapedPath(); norm != given {
		res.NormalizedFrom = given
	}
	for _, rt := range t.routes {
		m, i := rt.test(r, &host)
		if m == matched {
			res.Routes = append(res.Routes, RouteCheck{Route: rt.name, Matched: true})
			res.Route = rt.name
			if rt.redirect != nil {
				res.Status, res.Error = rt.redirect.status, "the route redirects: the proxy answers "+strconv.Itoa(rt.redirect.status)+" without sending anything upstream"
				return res
			}
			tg, _ := rt.choose(r) // counts no split decision
			res.Pipeline = tg.pipe
			if tr := rt.traffic; tr != nil && len(tr.members) > 1 {
				var b strings.Builder
				prev := uint64(0)
				for i, m := range tr.members {
					if i > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "%s %d", m.pipe.Upstream().Name(), tr.cum[i]-prev)
					prev = tr.cum[i]
				}
				fmt.Fprintf(&b, "; this request: %s", tg.pipe.Upstream().Name())
				res.Split = b.String()
			}
			return res
		}
		res.Routes = append(res.Routes, RouteCheck{Route: rt.name, Reason: rt.missReason(r, host, m, i)})
	}
	res.Status, res.Error = http.StatusNotFound, "no route matches "+r.Method+" "+host+r.URL.Path+": the proxy answers 404 "+CodeNoRoute
	return res
}

// missReason words what test found: miss m (header i) of request r, whose
// host is host.
func (rt *route) missReason(r *http.Request, host string, m miss, i int) string {
	switch m {
	case missHost:
		want := strconv.Quote(rt.host)
		if rt.wildcard {
			want = strconv.Quote("*" + rt.host)
		}
		if host == "" {
			return "host differs: the request has no host, the route wants " + want
		}
		return "host differs: " + strconv.Quote(host) + " is not " + want
	case missPath:
		return "path prefix differs: " + strconv.Quote(r.URL.Path) + " does not start with " + strconv.Quote(rt.prefix)
	case missMethod:
		return "method not allowed: " + r.Method + " is not one of " + strings.Join(rt.methods, ", ")
	case missHeader:
		h := rt.headers[i]
		if v := r.Header[h[0]]; len(v) > 0 {
			return "header " + h[0] + " value differs: " + strconv.Quote(v[0]) + " is not " + strconv.Quote(h[1])
		}
		return "header " + h[0] + " missing: the route wants " + strconv.Quote(h[1])
	}
	return ""
}
