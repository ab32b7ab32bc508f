package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/registryd"
)

// EmbeddedRegistry is the reserved registry name of the embedded registry.
const EmbeddedRegistry = "embedded"

// RegistryKinds are the kinds of external registries.
var RegistryKinds = []string{"consul", "etcd", "dns", "static"}

func registryEnabled(r *Registry) bool { return r != nil && (r.Enabled == nil || *r.Enabled) }

// RegistryEnabled reports whether the configuration runs the embedded
// registry.
func (c *Config) RegistryEnabled() bool { return registryEnabled(c.Registry) }

func (v *validator) checkRegistry() {
	r := v.cfg.Registry
	if r == nil || v.bad(r) {
		return
	}
	if r.Listen == "" && v.present(&r.Listen) {
		v.errorf(&r.Listen, "registry.listen must not be empty; to turn the embedded registry off, set registry.enabled: false")
	}
	host := "127.0.0.1"
	if r.Listen != "" {
		h, _, err := splitAddr(r.Listen, listenPort)
		switch {
		case err != nil:
			v.errorf(&r.Listen, "registry.listen %q %v", r.Listen, err)
			return
		case h != "" && !validHost(h):
			v.errorf(&r.Listen, "registry.listen %q has an invalid host %q", r.Listen, h)
			return
		}
		host = h
	}
	if r.ACLToken != "" && r.ACLTokenFile != "" {
		v.errorf(&r.ACLTokenFile, "registry: set acl_token or acl_token_file, not both")
	}
	if r.ACLTokenFile != "" {
		if b, err := v.readFile(r.ACLTokenFile); err != nil {
			v.errorf(&r.ACLTokenFile, "registry.acl_token_file %q: %v", r.ACLTokenFile, err)
		} else if strings.TrimSpace(string(b)) == "" {
			v.errorf(&r.ACLTokenFile, "registry.acl_token_file %q is empty", r.ACLTokenFile)
		}
	}
	if r.ACLReads && r.ACLToken == "" && r.ACLTokenFile == "" {
		v.errorf(&r.ACLReads, "registry.acl_reads needs acl_token or acl_token_file")
	}
	if registryEnabled(r) && r.ACLToken == "" && r.ACLTokenFile == "" && !r.Insecure && !isLoopback(host) {
		v.errorf(&r.Listen, "registry.listen %q is not loopback: set registry.acl_token (or acl_token_file) so that writes need it, or insecure: true to accept anyone's writes", r.Listen)
	}
	if r.MaxBodyBytes < 0 {
		v.errorf(&r.MaxBodyBytes, "registry.max_body_bytes must not be negative")
	}
	if n := r.MaxStateBytes; v.present(&r.MaxStateBytes) && !v.bad(&r.MaxStateBytes) && (n < registryd.MinMaxStateBytes || n > registryd.MaxMaxStateBytes) {
		v.errorf(&r.MaxStateBytes, "registry.max_state_bytes %v is outside %v to %v (the default is %v)",
			n, Size(registryd.MinMaxStateBytes), Size(registryd.MaxMaxStateBytes), DefaultRegistryMaxStateBytes)
	}
	if err := (registryd.Config{NodeName: r.NodeName}).Validate(); r.NodeName != "" && err != nil {
		v.errorf(&r.NodeName, "registry.%v", err)
	}
}

func (v *validator) checkRegistries() {
	for _, name := range sortedKeys(v.cfg.Registries) {
		b := v.cfg.Registries[name]
		if b == nil || v.bad(b) {
			continue
		}
		switch {
		case name == EmbeddedRegistry:
			v.keyErrorf(b, "registry name %q is reserved for the embedded registry (the top-level registry block)", name)
		case !validUpstreamName(name):
			v.keyErrorf(b, `registry name %q may contain only letters, digits, "_", "." and "-"`, name)
		}
		if b.Kind == "" {
			v.keyErrorf(b, "registry %q needs a kind (%s)", name, strings.Join(RegistryKinds, ", "))
			continue
		}
		if !slices.Contains(RegistryKinds, b.Kind) {
			v.errorf(&b.Kind, "unknown registry kind %q (known: %s)", b.Kind, strings.Join(RegistryKinds, ", "))
			continue
		}
		// Keys that belong to other kinds are mistakes, not silently ignored.
		allowed := map[string][]string{
			"consul": {"address", "token", "datacenter", "tls"},
			"etcd":   {"address", "addresses", "username", "password", "prefix", "tls"},
			"dns":    {"address", "record", "port", "min_ttl", "max_ttl"},
			"static": {"file"},
		}[b.Kind]
		for key, at := range map[string]any{
			"address": &b.Address, "addresses": &b.Addresses, "token": &b.Token, "username": &b.Username,
			"password": &b.Password, "datacenter": &b.Datacenter, "prefix": &b.Prefix, "tls": &b.TLS,
			"file": &b.File, "record": &b.Record, "port": &b.Port, "min_ttl": &b.MinTTL, "max_ttl": &b.MaxTTL,
		} {
			if v.present(at) && !slices.Contains(allowed, key) {
				v.keyErrorf(at, "%s is not a key of a %s registry (its keys: %s)", key, b.Kind, strings.Join(allowed, ", "))
			}
		}
		switch b.Kind {
		case "consul":
			if b.Address != "" {
				v.checkRegistryURL(&b.Address, b.Address)
			}
			if b.TLS != nil && strings.HasPrefix(b.Address, "http://") {
				v.errorf(&b.Address, "registry address %q says http but tls is set: use https://", b.Address)
			}
		case "etcd":
			if b.Address == "" && len(b.Addresses) == 0 {
				v.keyErrorf(b, "etcd registry %q needs address or addresses", name)
			}
			if b.Address != "" {
				v.checkRegistryURL(&b.Address, b.Address)
			}
			for i := range b.Addresses {
				v.checkRegistryURL(&b.Addresses[i], b.Addresses[i])
			}
			if b.Prefix != "" && !strings.HasPrefix(b.Prefix, "/") {
				v.errorf(&b.Prefix, "etcd prefix %q must start with \"/\"", b.Prefix)
			}
		case "dns":
			if b.Address != "" {
				if h, _, err := splitAddr(b.Address, dialPort); err != nil {
					v.errorf(&b.Address, "dns server address %q %v", b.Address, err)
				} else if !validHost(h) {
					v.errorf(&b.Address, "dns server address %q has an invalid host %q", b.Address, h)
				}
			}
			switch b.Record {
			case "", "srv":
				if b.Port != 0 {
					v.errorf(&b.Port, "port is for record a; SRV records carry their own ports")
				}
			case "a":
				if b.Port < 1 || b.Port > 65535 {
					v.keyErrorf(&b.Port, "record a needs a port from 1 to 65535, got %d", b.Port)
				}
			default:
				v.errorf(&b.Record, "unknown dns record %q (known: srv, a)", b.Record)
			}
			if b.MinTTL < 0 || b.MaxTTL < 0 || (b.MaxTTL != 0 && b.MinTTL > b.MaxTTL) {
				v.errorf(&b.MinTTL, "min_ttl (%v) and max_ttl (%v) must be positive with min_ttl <= max_ttl", b.MinTTL, b.MaxTTL)
			}
		case "static":
			if b.File == "" {
				v.keyErrorf(b, "static registry %q needs file (a static list belongs in an upstream's targets)", name)
			}
		}
		if t := b.TLS; t != nil && !v.bad(t) {
			// The loader a registry's client uses judges the block, as an
			// upstream's: readable files, PEM that parses, a key pair.
			_, _, err := loadClientTLS(t, v.readFile)
			v.place(field.Prefix("tls", err), b)
		}
	}
}

// checkRegistryURL checks a registry address: host:port or
// http(s)://host:port.
func (v *validator) checkRegistryURL(at *string, raw string) {
	hostport := raw
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			v.errorf(at, "registry address %q is not host:port or http(s)://host:port", raw)
			return
		}
		hostport = u.Host
		if u.Port() == "" {
			return
		}
	}
	switch h, _, err := splitAddr(hostport, dialPort); {
	case err != nil:
		v.errorf(at, "registry address %q %v", raw, err)
	case h == "" || !validHost(h):
		v.errorf(at, "registry address %q needs a valid host", raw)
	}
}

func (v *validator) checkUpstreamDiscovery(upstream string, d *UpstreamDiscovery) {
	if v.bad(d) {
		return
	}
	switch {
	case d.Registry == "":
		v.keyErrorf(d, "upstream %q: discovery.registry is required (%s)", upstream, v.knownRegistries())
	case v.client:
		// Any name: an entry of registries, or a registry the program
		// hands the client; client.New says which it lacks.
	case d.Registry == EmbeddedRegistry:
		if !v.cfg.RegistryEnabled() {
			v.errorf(&d.Registry, "discovery.registry %q needs the embedded registry: add a top-level registry block", d.Registry)
		}
	case v.cfg.Registries[d.Registry] == nil:
		v.errorf(&d.Registry, "discovery.registry %q is not defined (%s)", d.Registry, v.knownRegistries())
	}
	if d.Service == "" {
		v.keyErrorf(d, "upstream %q: discovery.service is required", upstream)
	}
	for i, t := range d.Tags {
		if t == "" {
			v.errorf(&d.Tags[i], "discovery.tags: a tag must not be empty")
		}
	}
}

func (v *validator) knownRegistries() string {
	if v.client {
		return "name an entry of registries, or a registry the program gives the client with client.WithRegistry"
	}
	names := sortedKeys(v.cfg.Registries)
	if v.cfg.RegistryEnabled() {
		names = append([]string{EmbeddedRegistry}, names...)
	}
	if len(names) == 0 {
		return "no registries are defined: add a registries entry or the registry block"
	}
	return "defined: " + strings.Join(names, ", ")
}

func (v *validator) checkDiscovery() {
	d := &v.cfg.Discovery
	if d.EmptyGrace < 0 {
		v.errorf(&d.EmptyGrace, "discovery.empty_grace must not be negative")
	}
}

// checkHTTPOnlyKeys reports tcp listener keys on an http listener.
func (v *validator) checkHTTPOnlyKeys(l *Listener) {
	for key, at := range map[string]any{
		"upstream": &l.Upstream, "tls_passthrough": &l.TLSPassthrough, "connect_attempts": &l.ConnectAttempts,
		"max_conns": &l.MaxConns, "max_conns_per_endpoint": &l.MaxConnsPerEndpoint, "queue": &l.Queue,
		"proxy_protocol": &l.ProxyProtocol,
	} {
		if v.present(at) {
			v.keyErrorf(at, "%s is a key of tcp listeners; an http listener routes with routes", key)
		}
	}
	if v.present(&l.SNI) {
		v.keyErrorf(&l.SNI, "sni is for tcp listeners with tls_passthrough: true; an http listener routes by match.host")
	}
	if l.AutoRoutes && !v.cfg.RegistryEnabled() {
		v.errorf(&l.AutoRoutes, "auto_routes reads the embedded registry: add a top-level registry block")
	}
}

// checkTCPListener checks a tcp listener's keys.
func (v *validator) checkTCPListener(l *Listener) {
	for key, at := range map[string]any{
		"routes": &l.Routes, "max_header_bytes": &l.MaxHeaderBytes, "max_body_bytes": &l.MaxBodyBytes,
		"access_log": &l.AccessLog, "auto_routes": &l.AutoRoutes,
		"h2c": &l.H2C, "redirect_https": &l.RedirectHTTPS, "redirect_https_port": &l.RedirectHTTPSPort,
		"trusted_proxies": &l.TrustedProxies,
	} {
		if v.present(at) {
			v.keyErrorf(at, "%s is for http listeners; a tcp listener forwards connections to its upstream", key)
		}
	}
	if l.TLS != nil {
		v.keyErrorf(l.TLS, "tls termination is for http listeners; a tcp listener can route TLS by name with tls_passthrough and sni")
	}
	if v.present(&l.Timeouts.ReadBody) {
		v.keyErrorf(&l.Timeouts.ReadBody, "timeouts.read_body is for http listeners; a tcp listener does not read request bodies (timeouts.idle closes silent connections)")
	}
	if v.present(&l.Timeouts.Idle) && l.Timeouts.Idle < 0 {
		v.errorf(&l.Timeouts.Idle, "timeouts.idle must not be negative")
	}
	v.checkTCPEngine(l)
	v.checkUpstreamRef(&l.Upstream, l.Upstream)
	if l.Upstream == "" && len(l.SNI) == 0 {
		v.keyErrorf(l, "tcp listener %q needs an upstream (or sni routes)", l.Name)
	}
	if len(l.SNI) > 0 && !l.TLSPassthrough {
		v.keyErrorf(&l.SNI, "sni routes need tls_passthrough: true: this tcp listener does not read the TLS ClientHello")
	}
	seen := map[string]*string{}
	for i := range l.SNI {
		r := &l.SNI[i]
		if len(r.Names) == 0 {
			v.keyErrorf(r, "sni[%d] needs names", i)
		}
		for j := range r.Names {
			n := strings.ToLower(r.Names[j])
			rest := strings.TrimPrefix(n, "*.")
			switch {
			case strings.Contains(rest, "*"):
				v.errorf(&r.Names[j], `sni name %q: "*" may only be a whole first label, as in "*.example.com"`, r.Names[j])
			case !validHost(rest) || strings.Contains(rest, ":"):
				v.errorf(&r.Names[j], "sni name %q is not a DNS name", r.Names[j])
			case seen[n] != nil:
				v.errorf(&r.Names[j], "duplicate sni name %q (first at line %d)", r.Names[j], v.line(seen[n]))
			default:
				seen[n] = &r.Names[j]
			}
		}
		if r.Upstream == "" {
			v.keyErrorf(r, "sni[%d] needs an upstream", i)
		}
		v.checkUpstreamRef(&r.Upstream, r.Upstream)
	}
	for _, c := range []struct {
		at   *int
		name string
	}{{&l.ConnectAttempts, "connect_attempts"}, {&l.MaxConns, "max_conns"}, {&l.MaxConnsPerEndpoint, "max_conns_per_endpoint"}} {
		if *c.at < 0 {
			v.errorf(c.at, "%s must not be negative, got %d", c.name, *c.at)
		}
	}
	if q := l.Queue; q != nil && !v.bad(q) {
		if q.Size < 1 {
			v.keyErrorf(&q.Size, "queue.size must be at least 1, got %d", q.Size)
		}
		if q.Timeout < 0 {
			v.errorf(&q.Timeout, "queue.timeout must not be negative")
		}
		if l.MaxConns == 0 {
			v.keyErrorf(q, "queue needs max_conns: connections queue for a slot under that cap")
		}
	}
	if p := l.ProxyProtocol; p != nil && !v.bad(p) {
		switch p.Send {
		case "", "v1", "v2":
		default:
			v.errorf(&p.Send, "proxy_protocol.send %q: use v1 or v2", p.Send)
		}
		if p.Accept && len(p.TrustedProxies) == 0 {
			v.keyErrorf(p, "proxy_protocol.accept needs trusted_proxies: headers are believed only from them")
		}
		for i, s := range p.TrustedProxies {
			if _, err := parsePrefix(s); err != nil {
				v.errorf(&p.TrustedProxies[i], "proxy_protocol.trusted_proxies: %q is not an address or CIDR prefix", s)
			}
		}
	}
}

func (v *validator) checkUpstreamRef(at *string, name string) {
	if name == "" || v.bad(&v.cfg.Upstreams) {
		return
	}
	if v.cfg.Upstreams[name] == nil {
		defined := "no upstreams are defined"
		if len(v.cfg.Upstreams) > 0 {
			defined = "defined: " + strings.Join(sortedKeys(v.cfg.Upstreams), ", ")
		}
		v.errorf(at, "upstream %q is not defined (%s)", name, defined)
	}
}

// parsePrefix parses an address or a CIDR prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// ParsePrefixes parses validated trusted_proxies entries.
func ParsePrefixes(list []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := parsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

var _ = fmt.Sprintf
