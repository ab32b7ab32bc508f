package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/field"
)

// SplitMember is one upstream of a route's traffic split and its share.
type SplitMember struct {
	// Upstream names the upstream. Required; each at most once per split.
	Upstream string `yaml:"upstream"`
	// Weight is the member's share against the sum of the split's
	// weights (95 and 5: 95% and 5%). Required, 1 to 1000000.
	Weight int `yaml:"weight"`
}

// SplitSticky makes a route's split choice a function of the request: a
// hash of the key picks the member, so one client keeps one version.
type SplitSticky struct {
	// Key is where the request's key is: header:NAME, cookie:NAME,
	// client_ip, path or query:NAME (the forms of an upstream's hash_key).
	// A request without the key gets the weighted random choice.
	// Required.
	Key string `yaml:"key"`
}

// Canary sends the requests that opt in (a header or a cookie with a given
// value) to one upstream, whatever the split would choose.
type Canary struct {
	// Upstream serves the requests that opt in. Required.
	Upstream string `yaml:"upstream"`
	// Header lists header names and the exact value that opts a request
	// in; any one matching entry (of header or cookie) does.
	Header map[string]string `yaml:"header"`
	// Cookie lists cookie names and the exact value that opts a request in.
	Cookie map[string]string `yaml:"cookie"`
}

// Mirror sends a copy of a share of a route's requests to another upstream
// and throws its answer away. The copy never delays or fails the request
// it copies.
type Mirror struct {
	// Upstream receives the copies. Required.
	Upstream string `yaml:"upstream"`
	// Percent is the share of the route's requests copied, more than 0 and
	// at most 100. Default 100.
	Percent float64 `yaml:"percent"`
	// MaxBody is the largest request body copied; a request with a larger
	// body, or one of unknown length (chunked), is not copied (counted as
	// skipped). Default 64KiB.
	MaxBody Size `yaml:"max_body"`
	// MaxConcurrency caps the copies in flight for the route; a copy over
	// it is dropped (counted). Default 16.
	MaxConcurrency int `yaml:"max_concurrency"`
}

// StickyCookie makes the proxy pin a client to one endpoint with a cookie
// it sets: the cookie's value is an opaque token, signed, naming the
// endpoint that answered. A request carrying a valid token goes to that
// endpoint while it is in the upstream and can take traffic; otherwise the
// balancing policy picks and the response sets a new cookie. A token that
// does not verify is ignored.
type StickyCookie struct {
	// Name is the cookie's name. Default sb_sticky.
	Name string `yaml:"name"`
	// TTL is the cookie's Max-Age. Default 0: a session cookie.
	TTL Duration `yaml:"ttl"`
	// Path is the cookie's Path. Default "/".
	Path string `yaml:"path"`
	// Secure marks the cookie Secure (sent over HTTPS only).
	Secure bool `yaml:"secure"`
	// HTTPOnly marks the cookie HttpOnly (hidden from scripts).
	HTTPOnly bool `yaml:"http_only"`
	// SameSite is lax, strict or none (none needs secure). Default: not
	// sent.
	SameSite string `yaml:"same_site"`
	// Secret is the key that signs the tokens. Every switchboard that
	// should honour the others' cookies, and every restart, needs the
	// same one. Default: a random key per process (cookies do not survive
	// a restart and are not honoured by other instances).
	Secret string `yaml:"secret"`
	// SecretFile reads the secret from a file instead (surrounding
	// whitespace trimmed); read again on every reload.
	SecretFile string `yaml:"secret_file"`

	key []byte // Secret, or the content of SecretFile; set by validation
}

// Key is the signing key: the secret, or what secret_file held when the
// configuration was loaded; nil for a random per-process key.
func (s *StickyCookie) Key() []byte {
	if s.Secret != "" {
		return []byte(s.Secret)
	}
	return s.key
}

// The bounds of a split's weights and a mirror's concurrency.
const (
	maxSplitWeight       = 1000000
	maxMirrorConcurrency = 65536
)

// Upstreams lists every upstream route r sends requests to, primary one
// first: its upstream, or its split's members in order, and its canary's
// if that is another. The mirror's upstream is not among them.
func (r *Route) Upstreams() []string {
	var out []string
	if len(r.Split) == 0 {
		out = append(out, r.Upstream)
	}
	for _, m := range r.Split {
		out = append(out, m.Upstream)
	}
	if c := r.Canary; c != nil && !slices.Contains(out, c.Upstream) {
		out = append(out, c.Upstream)
	}
	return out
}

// checkRouteUpstream checks the upstream a route sends to: upstream or
// split (one of them), its canary and its mirror.
func (v *validator) checkRouteUpstream(r *Route) {
	if r.Redirect != nil {
		// A route that redirects sends nothing upstream (checkRewrites
		// refuses an upstream beside it).
		for _, k := range []struct {
			name string
			at   any
			set  bool
		}{{"split", &r.Split, len(r.Split) > 0}, {"canary", r.Canary, r.Canary != nil}, {"mirror", r.Mirror, r.Mirror != nil}, {"sticky_cookie", r.StickyCookie, r.StickyCookie != nil}} {
			if k.set {
				v.keyErrorf(k.at, "a route that redirects has no %s: it sends nothing upstream", k.name)
			}
		}
		return
	}
	switch {
	case len(r.Split) > 0 && r.Upstream != "":
		v.errorf(&r.Split, "route has both upstream and split; use one")
	case len(r.Split) > 0:
		v.checkSplit(r)
	case v.present(&r.Split):
		v.errorf(&r.Split, "split must list at least one upstream")
	case r.Upstream == "":
		v.errorf(&r.Upstream, "route upstream (or split) is required")
	case v.cfg.Upstreams[r.Upstream] == nil && !v.bad(&v.cfg.Upstreams):
		v.errorf(&r.Upstream, "route upstream %q is not defined (%s)", r.Upstream, v.definedUpstreams())
	}
	if s := r.SplitSticky; s != nil && !v.bad(s) {
		if len(r.Split) == 0 {
			v.keyErrorf(s, "split_sticky needs split")
		}
		if s.Key == "" {
			v.keyErrorf(s, "split_sticky.key is required (header:NAME, cookie:NAME, client_ip, path or query:NAME)")
		} else if _, err := balance.ParseHashKey(s.Key); err != nil {
			v.errorf(&s.Key, "split_sticky.key: %v", unwrapField(err))
		}
	}
	if c := r.Canary; c != nil && !v.bad(c) {
		v.checkCanary(c)
	}
	if m := r.Mirror; m != nil && !v.bad(m) {
		v.checkMirror(r, m)
	}
	if s := r.StickyCookie; s != nil && !v.bad(s) {
		v.checkStickyCookie(s)
	}
}

// definedUpstreams says which upstreams there are, for "not defined".
func (v *validator) definedUpstreams() string {
	if len(v.cfg.Upstreams) == 0 {
		return "no upstreams are defined"
	}
	return "defined: " + strings.Join(sortedKeys(v.cfg.Upstreams), ", ")
}

// checkUpstreamName reports a reference to an upstream that is not defined.
func (v *validator) checkUpstreamName(at *string, key string) {
	switch {
	case *at == "":
		v.keyErrorf(at, "%s is required", key)
	case v.cfg.Upstreams[*at] == nil && !v.bad(&v.cfg.Upstreams):
		v.errorf(at, "%s %q is not defined (%s)", key, *at, v.definedUpstreams())
	}
}

func (v *validator) checkSplit(r *Route) {
	seen := map[string]*string{}
	for i := range r.Split {
		m := &r.Split[i]
		if v.bad(m) {
			continue
		}
		key := fmt.Sprintf("split[%d].upstream", i)
		if m.Upstream == "" {
			v.keyErrorf(m, "%s is required", key)
		} else {
			v.checkUpstreamName(&m.Upstream, key)
		}
		if first := seen[m.Upstream]; first != nil && m.Upstream != "" {
			v.errorf(&m.Upstream, "upstream %q is in the split twice (first at line %d)", m.Upstream, v.line(first))
		}
		seen[m.Upstream] = &m.Upstream
		switch {
		case !v.present(&m.Weight) && !v.bad(&m.Weight):
			v.keyErrorf(m, "split[%d].weight is required", i)
		case m.Weight < 1 || m.Weight > maxSplitWeight:
			v.errorf(&m.Weight, "split[%d].weight must be 1 to %d, got %d", i, maxSplitWeight, m.Weight)
		}
	}
}

func (v *validator) checkCanary(c *Canary) {
	v.checkUpstreamName(&c.Upstream, "canary.upstream")
	if len(c.Header) == 0 && len(c.Cookie) == 0 {
		v.keyErrorf(c, "canary needs a header or a cookie that opts a request in")
	}
	for _, name := range sortedKeys(c.Header) {
		if !isToken(name) {
			v.keyErrorf(entry(c.Header, name), "canary.header: %q is not a valid header name", name)
		}
	}
	for _, name := range sortedKeys(c.Cookie) {
		if !isToken(name) {
			v.keyErrorf(entry(c.Cookie, name), "canary.cookie: %q is not a valid cookie name", name)
		}
	}
}

func (v *validator) checkMirror(r *Route, m *Mirror) {
	v.checkUpstreamName(&m.Upstream, "mirror.upstream")
	if m.Upstream != "" && slices.Contains(r.Upstreams(), m.Upstream) {
		v.errorf(&m.Upstream, "mirror.upstream %q already serves this route; mirror to another upstream", m.Upstream)
	}
	if v.present(&m.Percent) && (m.Percent <= 0 || m.Percent > 100) {
		v.errorf(&m.Percent, "mirror.percent must be more than 0 and at most 100, got %v", m.Percent)
	}
	if v.present(&m.MaxConcurrency) && (m.MaxConcurrency < 1 || m.MaxConcurrency > maxMirrorConcurrency) {
		v.errorf(&m.MaxConcurrency, "mirror.max_concurrency must be 1 to %d, got %d", maxMirrorConcurrency, m.MaxConcurrency)
	}
}

func (v *validator) checkStickyCookie(s *StickyCookie) {
	if s.Name != "" && !isToken(s.Name) {
		v.errorf(&s.Name, "sticky_cookie.name %q is not a valid cookie name", s.Name)
	}
	if s.Path != "" && (!strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, ";\r\n\x00")) {
		v.errorf(&s.Path, "sticky_cookie.path %q must start with / and hold no ';' or control characters", s.Path)
	}
	switch strings.ToLower(s.SameSite) {
	case "", "lax", "strict":
	case "none":
		if !s.Secure {
			v.errorf(&s.SameSite, "sticky_cookie.same_site none needs secure: true (browsers refuse it otherwise)")
		}
	default:
		v.errorf(&s.SameSite, "sticky_cookie.same_site %q is unknown (known: lax, strict, none)", s.SameSite)
	}
	if s.Secret != "" && s.SecretFile != "" {
		v.errorf(&s.SecretFile, "sticky_cookie: set secret or secret_file, not both")
		return
	}
	if s.Secret != "" && len(s.Secret) < 16 {
		v.errorf(&s.Secret, "sticky_cookie.secret must be at least 16 bytes long, got %d", len(s.Secret))
	}
	if s.SecretFile != "" && !v.bad(&s.SecretFile) {
		b, err := v.readFile(s.SecretFile)
		switch key := strings.TrimSpace(string(b)); {
		case err != nil:
			v.errorf(&s.SecretFile, "sticky_cookie.secret_file %q: %v", s.SecretFile, err)
		case len(key) < 16:
			v.errorf(&s.SecretFile, "sticky_cookie.secret_file %q must hold at least 16 bytes, has %d", s.SecretFile, len(key))
		default:
			s.key = []byte(key)
		}
	}
}

// unwrapField is err's message without the key its field.Error names (the
// caller names the key itself).
func unwrapField(err error) error {
	if fe, ok := err.(*field.Error); ok {
		return fe.Err
	}
	return err
}

// The defaults of the traffic keys (docs/configuration.md).
const (
	DefaultMirrorPercent        = 100.0
	DefaultMirrorMaxBody        = 64 * KiB
	DefaultMirrorMaxConcurrency = 16
	DefaultStickyCookieName     = "sb_sticky"
	DefaultStickyCookiePath     = "/"
)

// trafficDefaults fills in route r's mirror and sticky cookie defaults.
func trafficDefaults(r *Route) {
	if m := r.Mirror; m != nil {
		setDefault(&m.Percent, DefaultMirrorPercent)
		setDefault(&m.MaxBody, DefaultMirrorMaxBody)
		setDefault(&m.MaxConcurrency, DefaultMirrorMaxConcurrency)
	}
	stickyCookieDefaults(r.StickyCookie)
}

func stickyCookieDefaults(s *StickyCookie) {
	if s != nil {
		setDefault(&s.Name, DefaultStickyCookieName)
		setDefault(&s.Path, DefaultStickyCookiePath)
		s.SameSite = strings.ToLower(s.SameSite)
	}
}

// proxyOnlyTraffic reports the traffic keys a client configuration's
// route r may not use: a call names its upstream.
func (v *validator) proxyOnlyTraffic(r *Route) {
	for _, k := range []struct {
		at   any
		name string
	}{{&r.Split, "split"}, {&r.SplitSticky, "split_sticky"}, {&r.Canary, "canary"}, {&r.Mirror, "mirror"}, {&r.StickyCookie, "sticky_cookie"}} {
		if v.present(k.at) {
			v.keyErrorf(k.at, "%s is for the proxy: a call names its upstream", k.name)
		}
	}
}
