package config

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"

	"github.com/switchboard-dev/switchboard/internal/placeholder"
)

// Rewrite changes the request a route sends upstream. The route still
// matches on the path the client asked for (normalised); the upstream
// receives the rewritten one, with the query kept. At most one of
// StripPrefix, ReplacePrefix and Regex may be set. Paths are written and
// compared in their escaped form, as they go on the wire ("%2F" stays
// "%2F").
type Rewrite struct {
	// StripPrefix is removed from the start of the path when the path
	// starts with it: /api with /api/users sends /users. A path left
	// empty becomes "/".
	StripPrefix string `yaml:"strip_prefix"`
	// ReplacePrefix replaces a leading From with To: {from: /api/, to:
	// /v2/} sends /api/users as /v2/users.
	ReplacePrefix *ReplacePrefix `yaml:"replace_prefix"`
	// Regex replaces every match of a regular expression (Go's RE2
	// syntax) in the path: {match: '^/u/(\d+)$', replace: '/users/$1'}.
	Regex *RegexRewrite `yaml:"regex"`
	// Host is the Host sent upstream (host or host:port). Default: the
	// client's, as it came; X-Forwarded-Host always carries the client's.
	Host string `yaml:"host"`
}

// ReplacePrefix is a path prefix and its replacement.
type ReplacePrefix struct {
	// From is the prefix to replace; the path must start with it. Required.
	From string `yaml:"from"`
	// To replaces it; it must start with "/". Required.
	To string `yaml:"to"`
}

// RegexRewrite is a regular expression over the path and its replacement.
type RegexRewrite struct {
	// Match is the expression, in Go's RE2 syntax. Required.
	Match string `yaml:"match"`
	// Replace replaces each match; $1, ${1} and ${name} insert groups
	// (Go's Regexp.Expand). Required.
	Replace string `yaml:"replace"`
}

// HeaderRules change a message's header fields: Remove first, then Set
// (replacing any values), then Add (appending a value). Names are
// case-insensitive. Values are templates: {client_ip}, {request_id},
// {host}, {hostport}, {path}, {query}, {method}, {scheme}, {upstream},
// {endpoint} (response headers only) and {header.NAME} stand for the
// request's values; "{{" is a literal "{".
type HeaderRules struct {
	// Set gives each named field exactly this value.
	Set map[string]string `yaml:"set"`
	// Add appends a value to each named field.
	Add map[string]string `yaml:"add"`
	// Remove deletes the named fields.
	Remove []string `yaml:"remove"`
}

// Redirect answers a route's requests with a redirect. Exactly one of To
// and HTTPS is set.
type Redirect struct {
	// To is the Location, a template: "https://{host}{path}" or
	// "/new{path}". Without a "?" of its own, the request's query is
	// appended.
	To string `yaml:"to"`
	// HTTPS redirects to the request's own URL with the https scheme (and
	// Port, when set).
	HTTPS bool `yaml:"https"`
	// Port is the https port of an HTTPS redirect. Default: none in the
	// URL (443).
	Port int `yaml:"port"`
	// Status is 301, 302, 303, 307 or 308. Default 302 for To (temporary:
	// a mistake is not cached by browsers for good), 308 for HTTPS
	// (permanent, and a POST stays a POST).
	Status int `yaml:"status"`
}

// The default statuses of redirects.
const (
	DefaultRedirectStatus      = 302
	DefaultHTTPSRedirectStatus = 308
)

// applyRedirectDefaults fills in a route's redirect status.
func applyRedirectDefaults(r *Route) {
	if rd := r.Redirect; rd != nil && rd.Status == 0 {
		rd.Status = DefaultRedirectStatus
		if rd.HTTPS {
			rd.Status = DefaultHTTPSRedirectStatus
		}
	}
}

// reservedHeaders may not be named by header rules: they frame the
// message or belong to the hop, and the proxy writes them itself. Host is
// changed with rewrite.host.
var reservedHeaders = map[string]string{
	"Connection":        "it is hop-by-hop",
	"Keep-Alive":        "it is hop-by-hop",
	"Proxy-Connection":  "it is hop-by-hop",
	"Te":                "it is hop-by-hop",
	"Trailer":           "it is hop-by-hop",
	"Transfer-Encoding": "it frames the message",
	"Upgrade":           "it is hop-by-hop",
	"Content-Length":    "it frames the message",
}

// checkRewrites checks a route's rewrite, header rules and redirect, and
// canonicalises the header rules' names.
func (v *validator) checkRewrites(r *Route) {
	if rd := r.Redirect; rd != nil && !v.bad(rd) {
		v.checkRedirect(r, rd)
	}
	if rw := r.Rewrite; rw != nil && !v.bad(rw) {
		v.checkRewrite(rw)
	}
	redirects := r.Redirect != nil
	if h := r.RequestHeaders; h != nil && !v.bad(h) {
		v.checkHeaderRules("request_headers", h, false, redirects)
	}
	if h := r.ResponseHeaders; h != nil && !v.bad(h) {
		v.checkHeaderRules("response_headers", h, true, redirects)
	}
}

// checkClientRewrites reports the proxy's rewrite keys on a route of a
// client configuration.
func (v *validator) checkClientRewrites(r *Route) {
	for _, k := range []struct {
		key string
		at  any
	}{{"rewrite", &r.Rewrite}, {"request_headers", &r.RequestHeaders}, {"response_headers", &r.ResponseHeaders}, {"redirect", &r.Redirect}} {
		if v.present(k.at) {
			v.keyErrorf(k.at, "%s is for the proxy: a program shapes its own requests", k.key)
		}
	}
}

func (v *validator) checkRedirect(r *Route, rd *Redirect) {
	if v.present(&r.Upstream) {
		v.keyErrorf(&r.Upstream, "a route has either upstream or redirect, not both")
	}
	for key, at := range map[string]any{
		"rewrite": &r.Rewrite, "request_headers": &r.RequestHeaders, "buffer_requests": &r.BufferRequests,
		"rate_limit": &r.RateLimit, "concurrency": &r.Concurrency, "breaker": &r.Breaker,
		"retry": &r.Retry, "fallback": &r.Fallback,
	} {
		if v.present(at) {
			v.keyErrorf(at, "%s has no effect on a route that redirects: it sends nothing upstream", key)
		}
	}
	switch {
	case rd.To != "" && rd.HTTPS:
		v.keyErrorf(&rd.HTTPS, "redirect has both to and https; use one")
	case rd.To == "" && !rd.HTTPS:
		v.keyErrorf(rd, "redirect needs to (the Location, e.g. \"https://{host}{path}\") or https: true")
	case rd.To != "":
		v.checkRedirectTarget(rd)
	}
	if v.present(&rd.Port) && !rd.HTTPS {
		v.keyErrorf(&rd.Port, "redirect.port is the port of an https redirect; write it into to instead")
	} else if rd.Port < 0 || rd.Port > 65535 {
		v.errorf(&rd.Port, "redirect.port %d is out of range (1 to 65535)", rd.Port)
	}
	switch rd.Status {
	case 0, 301, 302, 303, 307, 308:
	default:
		v.errorf(&rd.Status, "redirect.status %d is not a redirect status (301, 302, 303, 307 or 308)", rd.Status)
	}
}

// sampleValue renders a placeholder for checking the shape of a target.
func sampleValue(p placeholder.Part) string {
	switch p.Kind {
	case placeholder.ClientIP:
		return "192.0.2.1"
	case placeholder.Host:
		return "example.com"
	case placeholder.HostPort:
		return "example.com:8080"
	case placeholder.Path:
		return "/p"
	case placeholder.Method:
		return "GET"
	case placeholder.Scheme:
		return "https"
	}
	return "x"
}

func (v *validator) checkRedirectTarget(rd *Redirect) {
	t, err := placeholder.Parse(rd.To)
	if err != nil {
		v.errorf(&rd.To, "redirect.to %q %v", rd.To, err)
		return
	}
	for _, k := range []placeholder.Kind{placeholder.Upstream, placeholder.Endpoint} {
		if t.Uses(k) {
			v.errorf(&rd.To, "redirect.to %q uses %v, but a route that redirects has no upstream", rd.To, k)
			return
		}
	}
	if !validHeaderValue(rd.To) {
		v.errorf(&rd.To, "redirect.to %q contains a control character", rd.To)
		return
	}
	s := t.Render(sampleValue)
	u, err := url.Parse(s)
	switch {
	case err != nil:
		v.errorf(&rd.To, "redirect.to %q is not a URL: %v", rd.To, err)
	case u.Scheme == "" && (!strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//")):
		v.errorf(&rd.To, `redirect.to %q must be an absolute URL ("https://{host}{path}") or a path starting with "/"`, rd.To)
	case u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https":
		v.errorf(&rd.To, "redirect.to %q has scheme %q; want http or https", rd.To, u.Scheme)
	case u.Scheme != "" && u.Host == "":
		v.errorf(&rd.To, "redirect.to %q has no host", rd.To)
	}
}

func (v *validator) checkRewrite(rw *Rewrite) {
	var set []string
	if rw.StripPrefix != "" {
		set = append(set, "strip_prefix")
		if err := checkPathText(rw.StripPrefix, false); err != nil {
			v.errorf(&rw.StripPrefix, "rewrite.strip_prefix %q %v", rw.StripPrefix, err)
		}
	}
	if p := rw.ReplacePrefix; p != nil && !v.bad(p) {
		set = append(set, "replace_prefix")
		for _, f := range []struct {
			key string
			at  *string
		}{{"from", &p.From}, {"to", &p.To}} {
			if *f.at == "" {
				v.keyErrorf(p, "rewrite.replace_prefix.%s is required", f.key)
			} else if err := checkPathText(*f.at, false); err != nil {
				v.errorf(f.at, "rewrite.replace_prefix.%s %q %v", f.key, *f.at, err)
			}
		}
	}
	if x := rw.Regex; x != nil && !v.bad(x) {
		set = append(set, "regex")
		switch _, err := regexp.Compile(x.Match); {
		case x.Match == "":
			v.keyErrorf(x, "rewrite.regex.match (a regular expression over the path) is required")
		case err != nil:
			v.errorf(&x.Match, "rewrite.regex.match %q is not a regular expression: %v", x.Match, err)
		}
		if x.Replace == "" {
			v.keyErrorf(x, "rewrite.regex.replace is required")
		} else if err := checkPathText(x.Replace, true); err != nil {
			v.errorf(&x.Replace, "rewrite.regex.replace %q %v", x.Replace, err)
		}
	}
	if len(set) > 1 {
		v.keyErrorf(rw, "rewrite has %s; use one path rewrite", strings.Join(set, " and "))
	}
	if h := rw.Host; h != "" {
		if err := checkHostPort(h); err != nil {
			v.errorf(&rw.Host, "rewrite.host %q %v", h, err)
		}
	}
}

// checkHostPort checks a Host value: a name or an IP address (an IPv6
// address in brackets), with an optional port.
func checkHostPort(h string) error {
	host := h
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		host = h[1 : len(h)-1]
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return fmt.Errorf("has %q in brackets, which is not an IPv6 address", host)
		}
		return nil
	}
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		hh, _, err := splitAddr(h, dialPort)
		if err != nil {
			return err
		}
		host = hh
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !strings.HasPrefix(h, "[") {
		return fmt.Errorf("is an IPv6 address; write it in brackets")
	}
	if !validHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")) {
		return fmt.Errorf("is not a host name or host:port")
	}
	return nil
}

// CheckStripPrefix returns why s cannot be a rewrite.strip_prefix, or
// nil: for routes made outside the file (auto routes' strip= option). Its
// error reads as the end of a sentence about the quoted value.
func CheckStripPrefix(s string) error { return checkPathText(s, false) }

// checkPathText checks a path (or a path replacement, when dollar) as
// written in the configuration: it must start with "/" (a replacement may
// start with a group) and be in escaped form: printable ASCII, no "?" or
// "#", "%" only as a percent-encoding.
func checkPathText(s string, dollar bool) error {
	if !strings.HasPrefix(s, "/") && !(dollar && strings.HasPrefix(s, "$")) {
		return fmt.Errorf(`must start with "/"`)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c <= ' ' || c >= 0x7f:
			return fmt.Errorf("has %q at byte %d; write it percent-encoded", c, i)
		case c == '?' || c == '#':
			return fmt.Errorf("has %q at byte %d; a path rewrite changes the path only (the query is kept)", c, i)
		case c == '%':
			if i+2 >= len(s) || !isHexDigit(s[i+1]) || !isHexDigit(s[i+2]) {
				return fmt.Errorf(`has a "%%" at byte %d that is not a percent-encoding`, i)
			}
		}
	}
	return nil
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkHeaderRules checks the header rules of key (request_headers or
// response_headers) and canonicalises their names, as net/http stores
// them.
func (v *validator) checkHeaderRules(key string, h *HeaderRules, response, redirects bool) {
	canonical := func(sub string, m map[string]string) (map[string]string, map[string]string) {
		if len(m) == 0 {
			return m, nil
		}
		// Walk the names in file order, so that a clash names the first.
		names := v.keysInFileOrder(m)
		out := make(map[string]string, len(m))
		from := map[string]string{}
		for _, name := range names {
			at := entry(m, name)
			if !isToken(name) {
				v.keyErrorf(at, "%s.%s: %q is not a valid header name", key, sub, name)
				continue
			}
			c := textproto.CanonicalMIMEHeaderKey(name)
			if why, ok := reservedHeaders[c]; ok {
				v.keyErrorf(at, "%s.%s: %s may not be changed: %s", key, sub, name, why)
				continue
			}
			if c == "Host" {
				v.keyErrorf(at, "%s.%s: Host is the request's host: change it with rewrite.host", key, sub)
				continue
			}
			if first, dup := from[c]; dup {
				v.keyErrorf(at, "%s.%s: %q and %q are the same header (names ignore case)", key, sub, first, name)
				continue
			}
			from[c] = name
			v.checkHeaderTemplate(key, sub, c, m[name], at, response, redirects)
			out[c] = m[name]
			v.pos.set(entry(out, c), v.pos.of(at))
		}
		return out, from
	}
	var setFrom map[string]string
	h.Set, setFrom = canonical("set", h.Set)
	h.Add, _ = canonical("add", h.Add)
	for i, name := range h.Remove {
		at := &h.Remove[i]
		if !isToken(name) {
			v.errorf(at, "%s.remove: %q is not a valid header name", key, name)
			continue
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if why, ok := reservedHeaders[c]; ok {
			v.errorf(at, "%s.remove: %s may not be changed: %s", key, name, why)
			continue
		}
		if c == "Host" {
			v.errorf(at, "%s.remove: the request's Host cannot be removed", key)
			continue
		}
		if s, ok := setFrom[c]; ok {
			v.errorf(at, "%s.remove: %s is also set (as %q); set replaces its values already", key, name, s)
			continue
		}
		h.Remove[i] = c
	}
}

func (v *validator) checkHeaderTemplate(key, sub, name, val string, at any, response, redirects bool) {
	if !validHeaderValue(val) {
		v.errorf(at, "%s.%s: the value for %s contains a control character", key, sub, name)
		return
	}
	t, err := placeholder.Parse(val)
	if err != nil {
		v.errorf(at, "%s.%s: the value for %s %v", key, sub, name, err)
		return
	}
	switch {
	case !response && t.Uses(placeholder.Endpoint):
		v.errorf(at, "%s.%s: the value for %s uses {endpoint}, which is known only once an endpoint answered: use it in response_headers", key, sub, name)
	case redirects && (t.Uses(placeholder.Endpoint) || t.Uses(placeholder.Upstream)):
		v.errorf(at, "%s.%s: the value for %s uses {upstream} or {endpoint}, but a route that redirects has no upstream", key, sub, name)
	}
}
