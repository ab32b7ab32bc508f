package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
	rlredis "github.com/switchboard-dev/switchboard/ratelimit/redis"
	"github.com/switchboard-dev/switchboard/upstream"
)

// validator runs the semantic checks on a decoded Config.
//
// A check reports a problem at the node a value came from by passing a
// pointer into the decoded Config: a struct (&l, or the *Upstream held in
// the Upstreams map), a field (&l.Listen), a list element (&l.Routes[i]),
// or entry(m, key) for an entry of a map of plain values:
//
//	v.errorf(&l.Listen, "listen address %q ...", l.Listen) // at the value
//	v.keyErrorf(u, "upstream name %q ...", name)           // at the key naming it
//	v.errorf(entry(m.Headers, name), "...")                // at a map entry
//
// A field that is missing from the file reports at the mapping that lacks
// it. A value that failed to decode is skipped: its problem is already
// reported and its zero value would only cause echoes.
type validator struct {
	cfg      *Config
	pos      *positions
	probs    *problems
	readFile func(path string) ([]byte, error)
	// client is set for a client configuration (ParseClient), whose
	// registries the program gives: discovery.registry names one of them.
	client bool
}

// checks run in order on every decoded Config, even one with decoding
// problems, so that one run reports everything. A new check is a method on
// *validator listed here.
var checks = []func(*validator){
	(*validator).checkAdmin,
	(*validator).checkLog,
	(*validator).checkListeners,
	(*validator).checkACME,
	(*validator).checkUpstreams,
	(*validator).checkRegistry,
	(*validator).checkRegistries,
	(*validator).checkDiscovery,
	(*validator).checkTracing,
}

// errorf reports a problem at the value at points to.
func (v *validator) errorf(at any, format string, args ...any) {
	if s := v.pos.of(at); !s.bad {
		v.probs.node(s.node(), format, args...)
	}
}

// keyErrorf reports a problem at the key that names the value at points
// to (a map key, or a struct field's key).
func (v *validator) keyErrorf(at any, format string, args ...any) {
	if s := v.pos.of(at); !s.bad {
		v.probs.node(s.keyNode(), format, args...)
	}
}

// line is the line of the value at points to, for "first at line N".
func (v *validator) line(at any) int { return v.pos.of(at).node().Line }

// present reports whether the value at points to was written in the file
// (and not as null).
func (v *validator) present(at any) bool {
	s := v.pos.of(at)
	return s.value != nil && !isNull(resolve(s.value))
}

// bad reports whether the value at points to failed to decode.
func (v *validator) bad(at any) bool { return v.pos.of(at).bad }

func (v *validator) checkAdmin() {
	a := &v.cfg.Admin
	if a.Listen == "" {
		if v.present(&a.Listen) {
			v.errorf(&a.Listen, "admin.listen must not be empty; to turn the admin API off, set admin.enabled: false")
		}
		return
	}
	h, _, err := splitAddr(a.Listen, listenPort)
	if err != nil {
		v.errorf(&a.Listen, "admin.listen %q %v", a.Listen, err)
		return
	}
	if adminEnabled(a) && a.Token == "" && !isLoopback(h) {
		v.errorf(&a.Listen, "admin.listen is not loopback; set admin.token so that writes require it")
	}
}

func adminEnabled(a *Admin) bool { return a.Enabled == nil || *a.Enabled }

func (v *validator) checkLog() {
	l := &v.cfg.Log
	switch l.Level {
	case "", "debug", "info", "warn", "error":
	default:
		v.errorf(&l.Level, "unknown log level %q (known: debug, info, warn, error)", l.Level)
	}
	switch l.Format {
	case "", "text", "json":
	default:
		v.errorf(&l.Format, "unknown log format %q (known: text, json)", l.Format)
	}
}

// binding is an address something listens on, for clash detection.
type binding struct {
	addr listenAddr
	desc string // what listens there, for the clash message
}

func (v *validator) checkListeners() {
	cfg := v.cfg
	var bound []binding
	if a := &cfg.Admin; adminEnabled(a) {
		raw := a.Listen
		desc := fmt.Sprintf("admin.listen (%q at line %d)", raw, v.line(&a.Listen))
		if raw == "" {
			raw = DefaultAdminListen
			desc = "the admin API's default address " + raw + " (set admin.listen to move it)"
		}
		if h, p, err := splitAddr(raw, listenPort); err == nil {
			bound = append(bound, binding{addr: normalizeListen(h, p), desc: desc})
		}
	}
	if r := cfg.Registry; registryEnabled(r) && !v.bad(r) {
		raw := r.Listen
		desc := fmt.Sprintf("registry.listen (%q at line %d)", raw, v.line(&r.Listen))
		if raw == "" {
			raw = DefaultRegistryListen
			desc = "the embedded registry's default address " + raw + " (set registry.listen to move it)"
		}
		if h, p, err := splitAddr(raw, listenPort); err == nil {
			b := binding{addr: normalizeListen(h, p), desc: desc}
			for _, o := range bound {
				if o.addr.clashes(b.addr) {
					v.errorf(&r.Listen, "%s clashes with %s", desc, o.desc)
					break
				}
			}
			bound = append(bound, b)
		}
	}
	names := map[string]*string{}
	routeNames := map[string]any{}
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		// routeBase names the listener's unnamed routes; it stays empty
		// when the name is missing or taken, to avoid echoing that problem
		// as clashing route names.
		routeBase := ""
		switch first := names[l.Name]; {
		case l.Name == "":
			v.errorf(&l.Name, "listener name is required")
		case first != nil:
			v.errorf(&l.Name, "duplicate listener name %q (first at line %d)", l.Name, v.line(first))
		default:
			names[l.Name] = &l.Name
			routeBase = l.Name
		}

		isHTTP := true
		switch l.Protocol {
		case "", "http":
			v.checkHTTPOnlyKeys(l)
		case "tcp":
			isHTTP = false
			v.checkTCPListener(l)
		default:
			v.errorf(&l.Protocol, "unknown protocol %q (supported: http, tcp)", l.Protocol)
			isHTTP = false
		}

		switch h, p, err := splitAddr(l.Listen, listenPort); {
		case l.Listen == "":
			v.errorf(&l.Listen, "listener listen address is required")
		case err != nil:
			v.errorf(&l.Listen, "listen address %q %v", l.Listen, err)
		case h != "" && !validHost(h):
			v.errorf(&l.Listen, "listen address %q has an invalid host %q", l.Listen, h)
		default:
			b := binding{
				addr: normalizeListen(h, p),
				desc: fmt.Sprintf("listener %q (%q at line %d)", l.Name, l.Listen, v.line(&l.Listen)),
			}
			for _, o := range bound {
				if o.addr.clashes(b.addr) {
					v.errorf(&l.Listen, "listen address %q clashes with %s", l.Listen, o.desc)
					break
				}
			}
			bound = append(bound, b)
		}

		if l.TLS != nil {
			v.checkTLS(l.TLS)
		}
		if isHTTP {
			v.checkListenerFront(l)
			v.checkTrustedProxies(l)
			v.checkEngine(l)
		}
		if isHTTP && len(l.Routes) == 0 && !v.bad(&l.Routes) && !l.AutoRoutes && !l.RedirectHTTPS {
			if l.Name != "" {
				v.errorf(&l.Routes, "listener %q has no routes", l.Name)
			} else {
				v.errorf(&l.Routes, "listener has no routes")
			}
		}
		for j := range l.Routes {
			v.checkRoute(routeBase, &l.Routes[j], j, routeNames)
		}
	}
}

// checkRoute checks r, route j of the listener named base ("" when the
// listener's name is missing or taken). routeNames holds the route names
// seen so far in the whole configuration, defaulted ones included, since
// the name is the route's identity in metrics.
func (v *validator) checkRoute(base string, r *Route, j int, routeNames map[string]any) {
	name, at := r.Name, any(&r.Name)
	if name == "" && base != "" {
		name, at = fmt.Sprintf("%s/%d", base, j), r
	}
	if name != "" {
		if first, dup := routeNames[name]; dup {
			if r.Name == "" {
				v.errorf(r, "route %d of listener %q gets the default name %q, which the route at line %d already has; rename one of them", j, base, name, v.line(first))
			} else {
				v.errorf(&r.Name, "duplicate route name %q (first at line %d)", name, v.line(first))
			}
		} else {
			routeNames[name] = at
		}
	}

	v.checkRouteUpstream(r)
	v.checkMatch(&r.Match)
	v.checkLimits(r)
	if b := r.BufferRequests; b != nil && !v.bad(b) {
		v.checkBuffer(b)
	}
	if c := r.Compress; c != nil && !v.bad(c) {
		v.checkCompress(c)
	}
	v.checkAccessControl(r)
	v.checkRewrites(r)
}

// checkBuffer checks a route's buffer_requests: memory within max, and a
// directory that exists.
func (v *validator) checkBuffer(b *BufferRequests) {
	memory, max := b.Memory, b.Max
	if memory == 0 {
		memory = DefaultBufferMemory
	}
	if max == 0 {
		max = DefaultBufferMax
	}
	if memory > max {
		at := any(&b.Memory)
		if !v.present(at) {
			at = &b.Max
		}
		v.errorf(at, "buffer_requests.memory (%d bytes) is more than buffer_requests.max (%d bytes), the largest body buffered", memory, max)
	}
	if b.Dir == "" || v.bad(&b.Dir) {
		return
	}
	switch fi, err := os.Stat(b.Dir); {
	case err != nil:
		v.errorf(&b.Dir, "buffer_requests.dir %q: %v", b.Dir, errors.Unwrap(err))
	case !fi.IsDir():
		v.errorf(&b.Dir, "buffer_requests.dir %q is not a directory", b.Dir)
	}
}

// checkLimits checks a route's rate limits and concurrency limit, and its retry,
// breaker and fallback. The library packages judge their own settings;
// their errors name the key, which place maps back to its line.
func (v *validator) checkLimits(r *Route) {
	names := map[string]any{}
	for i := range r.RateLimit {
		l := &r.RateLimit[i]
		if l.Name != "" {
			if first, dup := names[l.Name]; dup {
				v.errorf(&l.Name, "duplicate rate_limit name %q (first at line %d)", l.Name, v.line(first))
			}
			names[l.Name] = &l.Name
		}
		g := l.Global
		if g == nil {
			v.place(l.Config.Validate(), l)
			continue
		}
		v.place(rlredis.ValidateLimit(l.Config), l)
		switch h, _, err := splitAddr(g.Redis, dialPort); {
		case v.bad(&g.Redis):
		case g.Redis == "":
			v.keyErrorf(g, "global.redis (host:port of the Redis server) is required")
		case err != nil:
			v.errorf(&g.Redis, "global.redis %q %v", g.Redis, err)
		case h == "":
			v.errorf(&g.Redis, "global.redis %q needs a host", g.Redis)
		}
		v.place(field.Prefix("global", g.Config.Validate()), l)
	}
	if c := r.Concurrency; c != nil {
		v.place(c.Validate(), c)
	}
	if p := r.Retry; p != nil && !v.bad(p) {
		v.place(p.Validate(), p)
	}
	if b := r.Breaker; b != nil && !v.bad(b) {
		v.place(b.Validate(), b)
	}
	if f := r.Fallback; f != nil && !v.bad(f) {
		v.place(f.Validate(), f)
		v.place(f.CheckUpstreams(func(name string) bool { return v.cfg.Upstreams[name] != nil }), f)
	}
}

// place reports each problem of err, which a library config's Validate
// returned for the struct root points to, at the setting its field.Error
// path names ("burst", "steps[1].status", "global.timeout"): the path is
// followed through the yaml tags from root, the way the decoder filled it
// in. A setting the file leaves out is reported at the key of the nearest
// enclosing value that the file has, root's own key at worst.
func (v *validator) place(err error, root any) {
	for _, e := range field.Split(err) {
		chain, exact := locate(root, e.Path)
		if exact && v.present(chain[len(chain)-1]) {
			v.errorf(chain[len(chain)-1], "%v", e)
			continue
		}
		at := root
		for i := len(chain) - 1; i > 0; i-- {
			if v.present(chain[i]) {
				at = chain[i]
				break
			}
		}
		v.keyErrorf(at, "%v", e)
	}
}

// locate follows a field.Error path from root, a pointer to a decoded
// value, and returns pointers to the values on the way, root first. exact
// reports whether the whole path was followed: it ends early at a nil
// pointer, an index out of range, a name that is not a key, or a map's
// entry (whose value has no address to follow).
func locate(root any, path string) (chain []any, exact bool) {
	chain = []any{root}
	steps, ok := parsePath(path)
	if !ok {
		return chain, false
	}
	cur := reflect.ValueOf(root)
	for i, st := range steps {
		for cur.Kind() == reflect.Pointer {
			if cur.IsNil() {
				return chain, false
			}
			cur = cur.Elem()
		}
		switch {
		case st.name != "" && cur.Kind() == reflect.Map && cur.Type().Key().Kind() == reflect.String:
			// A map's entries have a place (entryKey) but no address to
			// follow further: the path ends at the entry.
			if !cur.MapIndex(reflect.ValueOf(st.name).Convert(cur.Type().Key())).IsValid() {
				return chain, false
			}
			return append(chain, entryKey{m: cur.Pointer(), key: st.name}), i == len(steps)-1
		case st.name != "":
			if cur.Kind() != reflect.Struct {
				return chain, false
			}
			f, found := fieldNamed(fieldsOf(cur.Type()), st.name)
			if !found {
				return chain, false
			}
			cur = cur.FieldByIndex(f.index)
		default:
			if cur.Kind() != reflect.Slice || st.index >= cur.Len() {
				return chain, false
			}
			cur = cur.Index(st.index)
		}
		chain = append(chain, cur.Addr().Interface())
	}
	return chain, true
}

// pathStep is one step of a field path: a key name, or a list index.
type pathStep struct {
	name  string
	index int
}

// parsePath splits "steps[1].status" into the steps steps, [1] and
// status. The empty path has no steps.
func parsePath(path string) ([]pathStep, bool) {
	var steps []pathStep
	for i := 0; i < len(path); {
		switch path[i] {
		case '[':
			j := strings.IndexByte(path[i:], ']')
			if j < 0 {
				return nil, false
			}
			n, err := strconv.Atoi(path[i+1 : i+j])
			if err != nil || n < 0 {
				return nil, false
			}
			steps = append(steps, pathStep{index: n})
			i += j + 1
		case '.':
			i++
			if len(steps) == 0 || i == len(path) || path[i] == '.' || path[i] == '[' {
				return nil, false
			}
		default:
			j := strings.IndexAny(path[i:], ".[")
			if j < 0 {
				j = len(path) - i
			}
			steps = append(steps, pathStep{name: path[i : i+j]})
			i += j
		}
	}
	return steps, true
}

// checkHealth checks an upstream's health block; the health package judges
// its active and passive settings.
func (v *validator) checkHealth(h *upstream.Health) {
	v.place(h.Validate(), h)
	// The health package reads rise or fall 0 as its default, the way an
	// absent key is read; written out, 0 is a mistake that it cannot see,
	// since no number of checks below 1 decides anything.
	if a := h.Active; a != nil && !v.bad(a) {
		for _, n := range []struct {
			key string
			at  *int
		}{{"rise", &a.Rise}, {"fall", &a.Fall}} {
			if *n.at == 0 && v.present(n.at) {
				v.errorf(n.at, "%s: must be at least 1, got 0", n.key)
			}
		}
	}
}

// checkMatch checks a route's matcher and normalizes it: methods are
// upper-cased and header names canonicalized, as net/http stores them.
func (v *validator) checkMatch(m *Match) {
	if h := m.Host; h != "" {
		rest := strings.TrimPrefix(h, "*.")
		switch {
		case strings.Contains(rest, "*"):
			v.errorf(&m.Host, `match.host %q: "*" may only start a host, as in "*.example.com"`, h)
		case !validHost(strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]")):
			v.errorf(&m.Host, "match.host %q is not a host name (leave out any port)", h)
		}
	}
	if p := m.PathPrefix; p != "" && !strings.HasPrefix(p, "/") {
		v.errorf(&m.PathPrefix, `match.path_prefix %q must start with "/"`, p)
	}
	for k, method := range m.Methods {
		if !isToken(method) {
			v.errorf(&m.Methods[k], "match.methods: %q is not a valid HTTP method", method)
			continue
		}
		m.Methods[k] = strings.ToUpper(method)
	}
	if len(m.Headers) == 0 {
		return
	}
	// Walk the headers in file order so that a clash names the first one.
	names := v.keysInFileOrder(m.Headers)
	canon := make(map[string]string, len(m.Headers))
	from := map[string]string{}
	for _, name := range names {
		val, at := m.Headers[name], entry(m.Headers, name)
		if !isToken(name) {
			v.keyErrorf(at, "match.headers: %q is not a valid header name", name)
			continue
		}
		if !validHeaderValue(val) {
			v.errorf(at, "match.headers: the value for %s contains a control character", name)
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if first, dup := from[c]; dup {
			v.keyErrorf(at, "match.headers: %q and %q are the same header (names ignore case)", first, name)
			continue
		}
		from[c] = name
		canon[c] = val
		v.pos.set(entry(canon, c), v.pos.of(at))
	}
	m.Headers = canon
}

// keysInFileOrder returns the keys of m, a map of plain values decoded
// from the file, in the order the file has them.
func (v *validator) keysInFileOrder(m map[string]string) []string {
	names := sortedKeys(m)
	sort.SliceStable(names, func(i, j int) bool {
		a, b := v.pos.of(entry(m, names[i])).keyNode(), v.pos.of(entry(m, names[j])).keyNode()
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	return names
}

func (v *validator) checkUpstreams() {
	for _, name := range sortedKeys(v.cfg.Upstreams) {
		u := v.cfg.Upstreams[name]
		switch {
		case name == "":
			v.keyErrorf(u, "upstream name must not be empty")
		case !validUpstreamName(name):
			v.keyErrorf(u, `upstream name %q may contain only letters, digits, "_", "." and "-"`, name)
		}
		if !v.bad(&u.Balance) {
			// The policy's own builder is the one judge of its settings.
			v.place(u.Balance.Validate(), &u.Balance)
		}
		switch u.Protocol {
		case "", "http1", "h2c", ProtocolHTTPS:
		default:
			v.errorf(&u.Protocol, "unknown upstream protocol %q (known: http1, h2c, https)", u.Protocol)
		}
		v.checkUpstreamTLS(name, u)
		if c := u.Concurrency; c != nil {
			v.place(c.Validate(), c)
		}
		v.checkHealth(&u.Health)
		if b := u.Breaker; b != nil && !v.bad(b) {
			v.place(b.Validate(), b)
		}
		switch {
		case u.Discovery != nil && len(u.Targets) > 0:
			v.errorf(&u.Targets, "upstream %q has both targets and discovery; use one", name)
		case u.Discovery != nil:
			v.checkUpstreamDiscovery(name, u.Discovery)
		case len(u.Targets) == 0 && !v.bad(&u.Targets):
			v.errorf(&u.Targets, "upstream %q has no targets (or discovery)", name)
		}
		seen := map[string]*string{}
		for i := range u.Targets {
			v.checkTarget(name, &u.Targets[i], seen)
		}
		if s := u.StickyCookie; s != nil && !v.bad(s) {
			v.checkStickyCookie(s)
		}
		if n := u.MaxIdlePerEndpoint; n != nil && *n < 0 {
			v.errorf(&u.MaxIdlePerEndpoint, "max_idle_per_endpoint must not be negative, got %d", *n)
		}
	}
}

// checkTarget checks one target of upstream; seen maps the normalized
// addresses of its earlier targets to their Address fields, and "id " and
// their explicit IDs to their ID fields.
func (v *validator) checkTarget(upstream string, t *endpoint.Spec, seen map[string]*string) {
	switch h, p, err := splitAddr(t.Address, dialPort); {
	case t.Address == "":
		v.errorf(&t.Address, "target address is required")
	case err != nil:
		v.errorf(&t.Address, "target address %q %v", t.Address, err)
	case h == "":
		v.errorf(&t.Address, "target address %q needs a host", t.Address)
	case !validHost(h):
		v.errorf(&t.Address, "target address %q has an invalid host %q", t.Address, h)
	default:
		key := net.JoinHostPort(strings.ToLower(h), strconv.Itoa(p))
		if first := seen[key]; first != nil {
			v.errorf(&t.Address, "duplicate target address %q in upstream %q (first at line %d)", t.Address, upstream, v.line(first))
		} else {
			seen[key] = &t.Address
		}
	}
	if t.Weight != 0 && (t.Weight < 1 || t.Weight > MaxWeight) {
		v.errorf(&t.Weight, "target weight %d is out of range (1 to %d)", t.Weight, MaxWeight)
	}
	if t.ID != "" {
		// IDs share seen with addresses under a prefix no address has.
		if first := seen["id "+t.ID]; first != nil {
			v.errorf(&t.ID, "duplicate target id %q in upstream %q (first at line %d)", t.ID, upstream, v.line(first))
		} else {
			seen["id "+t.ID] = &t.ID
		}
	}
}

// Whether an address may have port 0.
const (
	listenPort = true  // a listener or the admin API: 0 asks for any free port
	dialPort   = false // a target: 1 to 65535
)

// splitAddr splits host:port and checks that the port is a number from 1
// to 65535, or 0 when zeroOK. Its errors read as the end of a sentence
// that starts with the quoted address.
func splitAddr(addr string, zeroOK bool) (host string, port int, err error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", 0, fmt.Errorf("is not host:port (%s)", ae.Err)
		}
		return "", 0, fmt.Errorf("is not host:port (%v)", err)
	}
	for _, c := range []byte(ps) {
		if c < '0' || c > '9' {
			return "", 0, fmt.Errorf("has a non-numeric port %q", ps)
		}
	}
	port, err = strconv.Atoi(ps)
	switch {
	case err != nil || port > 65535:
		return "", 0, fmt.Errorf("has port %s, above 65535", ps)
	case port == 0 && !zeroOK:
		return "", 0, fmt.Errorf("has port %s, outside 1-65535", ps)
	}
	return host, port, nil
}

// listenAddr is a listen address reduced to what decides a clash.
type listenAddr struct {
	wildcard bool   // all interfaces
	host     string // normalized: an IP's canonical form, or a lower-cased name
	port     int
}

// normalizeListen reduces host and port to a listenAddr. Go listens on a
// dual-stack socket for "", 0.0.0.0 and ::, so all three are the wildcard;
// localhost is taken as 127.0.0.1, which Go listens on for it.
func normalizeListen(host string, port int) listenAddr {
	a := listenAddr{port: port}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			a.wildcard = true
		}
		a.host = ip.Unmap().String()
		return a
	}
	switch {
	case host == "":
		a.wildcard = true
	case strings.EqualFold(host, "localhost"):
		a.host = "127.0.0.1"
	default:
		a.host = strings.ToLower(host)
	}
	return a
}

// clashes reports whether two listeners could not both bind: the same port
// on the same host, or on any host when either is the wildcard. Port 0
// never clashes: each such listener gets a free port of its own.
func (a listenAddr) clashes(b listenAddr) bool {
	return a.port != 0 && a.port == b.port && (a.wildcard || b.wildcard || a.host == b.host)
}

// isLoopback reports whether host is a loopback address or "localhost".
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// validHost reports whether h is an IP address or a plausible DNS name
// (labels of letters, digits, "-" and "_").
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !isAlnum(c) && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// validUpstreamName reports whether name matches [A-Za-z0-9_.-]+.
func validUpstreamName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2),
// which methods and header names must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s may be sent as a header value: no
// control characters other than tab.
func validHeaderValue(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
