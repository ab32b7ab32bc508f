package httpproxy

import (
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/placeholder"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// A route's rewrites (config.Rewrite, request_headers, response_headers)
// are compiled once per table into a rewriter. Per request, the route
// still matches on the client's (normalised) path; the pipeline is handed
// a shallow copy of the request with the rewritten path and Host, so that
// every attempt (retries, hedges, a backup fallback step) sends the
// rewritten request, and the client's request stays as it came for the
// access log and the placeholders. Header rules change the header in
// place, after the proxy's own X-Forwarded-* and X-Request-Id.
//
// Allocation: literal header values are shared slices (len == cap, so an
// append copies), and a value that is one placeholder is a string the
// request already has, kept in the request's state (two of them; more
// take an allocation each). A path or host rewrite takes one allocation
// per request (upstreamReq, the copy); a value that mixes text and
// placeholders, a path rewrite that builds a new path, and a query to put
// back after it take one buffer per phase (request, response).

// rewriter is a route's compiled rewrites.
type rewriter struct {
	strip    string         // rewrite.strip_prefix
	from, to string         // rewrite.replace_prefix
	re       *regexp.Regexp // rewrite.regex
	repl     string
	host     string // rewrite.host

	req, resp headerRules
	// copy: a request needs an upstreamReq (a path or host rewrite).
	copy bool
	// literal: every header value is literal.
	literal bool
	// bufHint sizes the buffer of rendered values and paths.
	bufHint int
}

// headerRules are one direction's compiled header rules.
type headerRules struct {
	remove   []string
	set, add []headerRule
}

func (h *headerRules) empty() bool { return len(h.remove)+len(h.set)+len(h.add) == 0 }

// headerRule is one set or add rule: a literal value (lit) or a template.
type headerRule struct {
	name string
	lit  []string // the literal value, len == cap == 1; nil for a template
	tmpl placeholder.Template
}

// upstreamReq is the copy of a request that goes upstream with a
// rewritten path or Host, in one allocation.
type upstreamReq struct {
	req http.Request
	url url.URL
}

// newRewriter compiles rc's rewrites; nil when it has none.
func newRewriter(rc *config.Route) *rewriter {
	rw := &rewriter{literal: true}
	some := false
	if c := rc.Rewrite; c != nil {
		some = true
		rw.strip, rw.host = c.StripPrefix, c.Host
		if p := c.ReplacePrefix; p != nil {
			rw.from, rw.to = p.From, p.To
		}
		if x := c.Regex; x != nil {
			rw.re, rw.repl = regexp.MustCompile(x.Match), x.Replace
		}
		rw.copy = rw.strip != "" || rw.from != "" || rw.re != nil || rw.host != ""
	}
	if c := rc.RequestHeaders; c != nil {
		some = true
		rw.compile(&rw.req, c)
	}
	if c := rc.ResponseHeaders; c != nil {
		some = true
		rw.compile(&rw.resp, c)
	}
	if !some {
		return nil
	}
	return rw
}

func (rw *rewriter) compile(dst *headerRules, c *config.HeaderRules) {
	dst.remove = append([]string(nil), c.Remove...)
	rule := func(name, val string) headerRule {
		t, err := placeholder.Parse(val)
		if err != nil {
			panic("httpproxy: header rule not validated: " + err.Error())
		}
		if lit, ok := t.Literal(); ok {
			return headerRule{name: name, lit: []string{lit}[:1:1]}
		}
		rw.literal = false
		if len(t.Parts) > 1 {
			for _, p := range t.Parts {
				if p.Kind == placeholder.Literal {
					rw.bufHint += len(p.Text)
				} else {
					rw.bufHint += 32
				}
			}
		}
		return headerRule{name: name, tmpl: t}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Set)) {
		dst.set = append(dst.set, rule(name, c.Set[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Add)) {
		dst.add = append(dst.add, rule(name, c.Add[name]))
	}
}

// vars are the values placeholders stand for in one request.
type vars struct {
	client   *http.Request // as the client sent it, header prepared
	reqID    string
	upstream string
	endpoint string
}

func (v *vars) value(p placeholder.Part) string {
	r := v.client
	switch p.Kind {
	case placeholder.ClientIP:
		if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return ip
		}
		return r.RemoteAddr
	case placeholder.RequestID:
		return v.reqID
	case placeholder.Host:
		return hostOnly(r.Host)
	case placeholder.HostPort:
		return r.Host
	case placeholder.Path:
		return escapedPath(r)
	case placeholder.Query:
		return r.URL.RawQuery
	case placeholder.Method:
		return r.Method
	case placeholder.Scheme:
		if r.TLS != nil {
			return "https"
		}
		return "http"
	case placeholder.Upstream:
		return v.upstream
	case placeholder.Endpoint:
		return v.endpoint
	case placeholder.Header:
		if vv := r.Header[p.Text]; len(vv) > 0 {
			return vv[0]
		}
	}
	return ""
}

// hostOnly is a Host value without its port; an IPv6 address keeps its
// brackets, so that the result can go into a URL.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		return h[:i]
	}
	return h
}

// escapedPath is r's path as it goes on the wire: normalised, escaped,
// without the query.
func escapedPath(r *http.Request) string {
	if u := r.RequestURI; u != "" && u[0] == '/' {
		if i := strings.IndexByte(u, '?'); i >= 0 {
			return u[:i]
		}
		return u
	}
	return r.URL.EscapedPath()
}

// render returns t's text for v: a placeholder's value as it is, or text
// appended to *buf (made with capacity hint when nil).
func render(t *placeholder.Template, v *vars, buf *[]byte, hint int) string {
	if len(t.Parts) == 1 {
		return v.value(t.Parts[0])
	}
	if *buf == nil {
		*buf = make([]byte, 0, hint)
	}
	// *buf is only appended to: the bytes of a string handed out are
	// never written again (after a growth they stay in the old array,
	// which the string keeps alive).
	start := len(*buf)
	for _, p := range t.Parts {
		if p.Kind == placeholder.Literal {
			*buf = append(*buf, p.Text...)
		} else {
			*buf = append(*buf, v.value(p)...)
		}
	}
	b := (*buf)[start:]
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// one returns s as a one-value header slice, backed by rs when it has
// room.
func (rs *rewriteState) one(s string) []string {
	if int(rs.n) < len(rs.vals) {
		rs.vals[rs.n] = s
		rs.n++
		return rs.vals[rs.n-1 : rs.n : rs.n]
	}
	return []string{s}
}

// apply applies rules to h. Every value is rendered before any rule
// changes h, so that {header.NAME} reads the header as it was.
func (rs *rewriteState) apply(rules *headerRules, h http.Header, v *vars) {
	if rs.rw.literal {
		rules.applyLiteral(h)
		return
	}
	var buf []byte
	var rendered [8]string
	vals := rendered[:0]
	for i := range rules.set {
		if r := &rules.set[i]; r.lit == nil {
			vals = append(vals, render(&r.tmpl, v, &buf, rs.rw.bufHint))
		}
	}
	for i := range rules.add {
		if r := &rules.add[i]; r.lit == nil {
			vals = append(vals, render(&r.tmpl, v, &buf, rs.rw.bufHint))
		}
	}
	for _, name := range rules.remove {
		delete(h, name)
	}
	k := 0
	for i := range rules.set {
		r := &rules.set[i]
		if r.lit != nil {
			h[r.name] = r.lit
			continue
		}
		h[r.name] = rs.one(vals[k])
		k++
	}
	for i := range rules.add {
		r := &rules.add[i]
		val := r.lit
		if val == nil {
			val = rs.one(vals[k])
			k++
		}
		if prior := h[r.name]; len(prior) > 0 {
			h[r.name] = append(prior[:len(prior):len(prior)], val...)
		} else {
			h[r.name] = val
		}
	}
}

// request applies the route's request rewrites to r, whose header the
// proxy has prepared (reqID is its request id), and returns the request
// to send upstream: r itself, or a copy with the rewritten path and Host.
// upstream is the upstream the request goes to (a split's chosen member).
// It keeps what the response rules need in rs. ok is false when the
// rewritten path is not a path (a regex that climbs above the root).
func (rw *rewriter) request(r *http.Request, reqID, upstream string, rs *rewriteState) (out *http.Request, ok bool) {
	rs.rw, rs.client, rs.upstream = rw, r, upstream
	if !rw.req.empty() {
		v := vars{client: r, reqID: reqID, upstream: upstream}
		rs.apply(&rw.req, r.Header, &v)
	}
	if !rw.copy {
		return r, true
	}
	st := new(upstreamReq)
	st.req = *r
	out = &st.req
	if rw.host != "" {
		out.Host = rw.host
	}
	if rw.strip == "" && rw.from == "" && rw.re == nil {
		return out, true
	}
	old := escapedPath(r)
	if old == "" || old[0] != '/' {
		return out, true // "*" of OPTIONS: not a path
	}
	p := old
	switch {
	case rw.strip != "":
		if strings.HasPrefix(p, rw.strip) {
			if n := len(rw.strip); rw.strip[n-1] == '/' {
				p = p[n-1:]
			} else {
				p = p[n:]
			}
		}
	case rw.from != "":
		if strings.HasPrefix(p, rw.from) {
			p = rw.to + p[len(rw.from):]
		}
	default:
		p = rw.re.ReplaceAllString(p, rw.repl)
	}
	switch {
	case p == "":
		p = "/"
	case p[0] != '/':
		p = "/" + p
	}
	if p == old {
		return out, true
	}
	norm, ok := normalizePath(p)
	if !ok {
		return nil, false
	}
	st.url = *r.URL
	out.URL = &st.url
	out.URL.Path, out.URL.RawPath = norm, ""
	if strings.IndexByte(norm, '%') >= 0 {
		dec, err := url.PathUnescape(norm)
		if err != nil {
			return nil, false
		}
		out.URL.Path, out.URL.RawPath = dec, norm
	}
	if q := r.URL.RawQuery; q != "" || r.URL.ForceQuery {
		out.RequestURI = norm + "?" + q
	} else {
		out.RequestURI = norm
	}
	return out, true
}

// applyLiteral applies rules whose values are all literal.
func (rules *headerRules) applyLiteral(h http.Header) {
	for _, name := range rules.remove {
		delete(h, name)
	}
	for i := range rules.set {
		h[rules.set[i].name] = rules.set[i].lit
	}
	for i := range rules.add {
		r := &rules.add[i]
		if prior := h[r.name]; len(prior) > 0 {
			h[r.name] = append(prior[:len(prior):len(prior)], r.lit...)
		} else {
			h[r.name] = r.lit
		}
	}
}

// rewriteState is a request's rewrite state, kept in its reqState: what
// the response rules need, and the backing of two rendered values.
type rewriteState struct {
	rw       *rewriter
	client   *http.Request
	upstream string // the one the request went to, for {upstream}
	vals     [2]string
	n        uint8 // vals used
}

// response applies the route's response rules to h, the header of the
// response about to be relayed; c is the request's call, reqID its id.
func (rs *rewriteState) response(h http.Header, c *pipeline.Call, reqID string) {
	rw := rs.rw
	if rw == nil || rw.resp.empty() {
		return
	}
	v := vars{client: rs.client, reqID: reqID, upstream: rs.upstream}
	if ep := c.Endpoint(); ep != nil {
		v.endpoint = ep.Address()
	}
	rs.apply(&rw.resp, h, &v)
}

// redirect is a route's redirect action.
type redirect struct {
	to       placeholder.Template
	hasQuery bool // to has a "?" of its own: the request's query is not appended
	https    bool
	port     string // ":8443", or ""
	status   int
}

func newRedirect(c *config.Redirect) *redirect {
	if c == nil {
		return nil
	}
	rd := &redirect{https: c.HTTPS, status: c.Status}
	if rd.status == 0 {
		rd.status = config.DefaultRedirectStatus
		if rd.https {
			rd.status = config.DefaultHTTPSRedirectStatus
		}
	}
	if c.Port != 0 {
		rd.port = ":" + strconv.Itoa(c.Port)
	}
	if !rd.https {
		t, err := placeholder.Parse(c.To)
		if err != nil {
			panic("httpproxy: redirect not validated: " + err.Error())
		}
		rd.to = t
		for _, p := range t.Parts {
			if p.Kind == placeholder.Literal && strings.IndexByte(p.Text, '?') >= 0 {
				rd.hasQuery = true
			}
		}
	}
	return rd
}

// serveRedirect answers r with route rt's redirect.
func (h *Handler) serveRedirect(w http.ResponseWriter, r *http.Request, rt *route) result {
	rd := rt.redirect
	var b []byte
	if rd.https {
		host := hostOnly(r.Host)
		if host == "" {
			WriteError(w, http.StatusBadRequest, pipeline.CodeBadRequest, "the request has no Host to redirect to")
			return result{status: http.StatusBadRequest}
		}
		b = append(append(append(append(b, "https://"...), host...), rd.port...), escapedPath(r)...)
	} else {
		v := vars{client: r}
		if rd.to.Uses(placeholder.RequestID) {
			v.reqID = clientRequestID(r)
		}
		for _, p := range rd.to.Parts {
			if p.Kind == placeholder.Literal {
				b = append(b, p.Text...)
			} else {
				b = append(b, v.value(p)...)
			}
		}
	}
	if q := r.URL.RawQuery; q != "" && !rd.hasQuery {
		b = append(append(b, '?'), q...)
	}
	hdr := w.Header()
	hdr["Location"] = []string{safeLocation(b)}
	if rw := rt.rewrite; rw != nil && !rw.resp.empty() {
		v := vars{client: r, reqID: clientRequestID(r)}
		rs := &rewriteState{rw: rw, client: r}
		rs.apply(&rw.resp, hdr, &v)
	}
	hdr["Content-Length"] = []string{"0"}
	w.WriteHeader(rd.status)
	return result{status: rd.status}
}

// safeLocation returns a rendered redirect target as a Location that
// cannot name a host its template did not: the client's path and headers
// fill placeholders, and browsers read "//host", "/\host" (a backslash
// is a slash to them) and "/<tab>/host" (they drop tabs and newlines, and
// trim spaces) as another host's address. Spaces and control characters
// are percent-encoded wherever they are, and a relative target's second
// character is when it is a slash or a backslash.
func safeLocation(b []byte) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			n++
		}
	}
	var out []byte
	if n > 0 {
		out = make([]byte, 0, len(b)+2*n+2)
		for _, c := range b {
			if c <= ' ' || c == 0x7f {
				out = append(out, '%', hex[c>>4], hex[c&0xf])
			} else {
				out = append(out, c)
			}
		}
	} else {
		out = b
	}
	if len(out) > 1 && out[0] == '/' && (out[1] == '/' || out[1] == '\\') {
		c := out[1]
		out = append([]byte{'/', '%', hex[c>>4], hex[c&0xf]}, out[2:]...)
	}
	return string(out)
}

// clientRequestID is the client's X-Request-Id when it is one the proxy
// would keep, or "".
func clientRequestID(r *http.Request) string {
	if id := r.Header["X-Request-Id"]; len(id) == 1 && validRequestID(id[0]) {
		return id[0]
	}
	return ""
}
