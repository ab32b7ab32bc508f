package httpproxy

import (
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-dev/switchboard/config"
)

// corsPolicy is a route's CORS policy with its answers' header values
// made once. The values are shared by every response: each slice has its
// length as capacity, so that an Add to one makes a copy.
type corsPolicy struct {
	anyOrigin   bool
	origins     map[string]bool // exact, lower-case
	wildcards   []originPattern
	methods     []string
	anyHeader   bool
	headers     []string // canonical
	credentials bool

	allowMethods  []string // Access-Control-Allow-Methods
	allowHeaders  []string // Access-Control-Allow-Headers; nil for none or any
	expose        []string // Access-Control-Expose-Headers; nil for none
	maxAge        []string // Access-Control-Max-Age; nil when not set
	preflightVary []string
}

// originPattern is "scheme://*.suffix[:port]": prefix is "scheme://" and
// suffix ".suffix[:port]".
type originPattern struct{ prefix, suffix string }

var (
	valStar           = []string{"*"}
	valTrue           = []string{"true"}
	valOrigin         = []string{"Origin"}
	corsResponseNames = []string{
		"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers",
		"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age",
	}
)

func newCORSPolicy(c *config.CORS) *corsPolicy {
	p := &corsPolicy{origins: map[string]bool{}, methods: c.AllowMethods, credentials: c.AllowCredentials}
	for _, o := range c.AllowOrigins {
		if o == "*" {
			p.anyOrigin = true
			continue
		}
		i := strings.Index(o, "://") + len("://")
		if rest, ok := strings.CutPrefix(o[i:], "*"); ok {
			p.wildcards = append(p.wildcards, originPattern{prefix: o[:i], suffix: rest})
		} else {
			p.origins[o] = true
		}
	}
	for _, h := range c.AllowHeaders {
		if h == "*" {
			p.anyHeader = true
		} else {
			p.headers = append(p.headers, h)
		}
	}
	p.allowMethods = list1(strings.Join(c.AllowMethods, ", "))
	if !p.anyHeader && len(p.headers) > 0 {
		p.allowHeaders = list1(strings.Join(p.headers, ", "))
	}
	if len(c.ExposeHeaders) > 0 {
		p.expose = list1(strings.Join(c.ExposeHeaders, ", "))
	}
	if c.MaxAge > 0 {
		p.maxAge = list1(strconv.FormatInt(int64(c.MaxAge.Std().Seconds()), 10))
	}
	p.preflightVary = list1("Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	return p
}

// list1 is a header value of one element whose capacity is its length.
func list1(s string) []string { return []string{s}[:1:1] }

// isPreflight reports whether r is a CORS preflight request.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header["Origin"]) > 0 && len(r.Header["Access-Control-Request-Method"]) > 0
}

// preflightMatches reports whether r is a preflight for a method of
// methods: a route that matches some methods matches the preflights
// for them too, when it has a CORS policy to answer them.
func (rt *route) preflightMatches(r *http.Request) bool {
	if rt.access == nil || rt.access.cors == nil || !isPreflight(r) {
		return false
	}
	return contains(rt.methods, r.Header["Access-Control-Request-Method"][0])
}

// allows reports whether origin is allowed.
func (p *corsPolicy) allows(origin string) bool {
	if p.anyOrigin {
		return true
	}
	if hasUpper(origin) {
		origin = strings.ToLower(origin)
	}
	if p.origins[origin] {
		return true
	}
	for _, w := range p.wildcards {
		rest, ok := strings.CutPrefix(origin, w.prefix)
		if !ok || len(rest) <= len(w.suffix) || !strings.HasSuffix(rest, w.suffix) {
			continue
		}
		if label := rest[:len(rest)-len(w.suffix)]; !strings.ContainsAny(label, ":/@?#") {
			return true
		}
	}
	return false
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// preflight answers a preflight request: 204 with the policy's
// Access-Control-Allow-* headers when it allows the origin, the method
// and every header asked for; otherwise 403 cors_forbidden saying which
// it does not allow. It returns the status sent.
func (p *corsPolicy) preflight(w http.ResponseWriter, r *http.Request) int {
	h := w.Header()
	h["Vary"] = p.preflightVary
	origin := r.Header["Origin"]
	method := r.Header["Access-Control-Request-Method"][0]
	if !p.allows(origin[0]) {
		WriteError(w, http.StatusForbidden, CodeCORSForbidden, "CORS: origin "+strconv.Quote(origin[0])+" is not allowed")
		return http.StatusForbidden
	}
	if !contains(p.methods, method) {
		WriteError(w, http.StatusForbidden, CodeCORSForbidden, "CORS: method "+strconv.Quote(method)+" is not allowed (allowed: "+p.allowMethods[0]+")")
		return http.StatusForbidden
	}
	asked := r.Header["Access-Control-Request-Headers"]
	if !p.anyHeader {
		for _, v := range asked {
			for name := range strings.SplitSeq(v, ",") {
				if name = strings.TrimSpace(name); name != "" && !p.allowsHeader(name) {
					WriteError(w, http.StatusForbidden, CodeCORSForbidden, "CORS: request header "+strconv.Quote(name)+" is not allowed")
					return http.StatusForbidden
				}
			}
		}
	}
	p.setOrigin(h, origin)
	h["Access-Control-Allow-Methods"] = p.allowMethods
	switch {
	case p.anyHeader && len(asked) > 0:
		// Echoed rather than "*", which browsers take literally on a
		// request with credentials.
		h["Access-Control-Allow-Headers"] = asked
	case p.allowHeaders != nil:
		h["Access-Control-Allow-Headers"] = p.allowHeaders
	}
	if p.maxAge != nil {
		h["Access-Control-Max-Age"] = p.maxAge
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func (p *corsPolicy) allowsHeader(name string) bool {
	for _, a := range p.headers {
		if strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// setOrigin sets Access-Control-Allow-Origin (and -Credentials) for an
// allowed origin, given as r.Header["Origin"].
func (p *corsPolicy) setOrigin(h http.Header, origin []string) {
	if p.anyOrigin && !p.credentials {
		h["Access-Control-Allow-Origin"] = valStar
	} else {
		h["Access-Control-Allow-Origin"] = origin[:1:1]
	}
	if p.credentials {
		h["Access-Control-Allow-Credentials"] = valTrue
	}
}

// decorate sets the CORS headers of the answer to a request that is not a
// preflight, in h, replacing any the upstream sent: the policy is the one
// authority on them. Vary gets Origin whether or not it allows the
// request's origin, since the answer depends on it.
func (p *corsPolicy) decorate(h http.Header, r *http.Request) {
	for _, k := range corsResponseNames {
		delete(h, k)
	}
	switch vary := h["Vary"]; {
	case len(vary) == 0:
		h["Vary"] = valOrigin
	case !httpguts.HeaderValuesContainsToken(vary, "Origin"):
		h["Vary"] = append(vary[:len(vary):len(vary)], "Origin")
	}
	origin := r.Header["Origin"]
	if len(origin) == 0 || !p.allows(origin[0]) {
		return
	}
	p.setOrigin(h, origin)
	if p.expose != nil {
		h["Access-Control-Expose-Headers"] = p.expose
	}
}
