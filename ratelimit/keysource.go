package ratelimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-dev/switchboard/field"
)

// The places a keyed limiter can take a request's key from.
const (
	KeyClientIP = "client_ip" // the client's IP address; see KeySource.TrustedProxies
	KeyHeader   = "header"    // header:NAME, the first value of request header NAME
	KeyPath     = "path"      // the request path, without the query
	KeyRoute    = "route"     // the route's name: one limiter shared by the whole route
)

// KeySource says where a keyed limiter finds a request's key. It is written
// as client_ip, header:NAME, path or route (ParseKeySource).
type KeySource struct {
	// Kind is KeyClientIP, KeyHeader, KeyPath or KeyRoute.
	Kind string
	// Name is the header name in canonical form (X-Api-Key) for KeyHeader;
	// empty otherwise.
	Name string
	// TrustedProxies are the peers whose X-Forwarded-For is believed, for
	// KeyClientIP. Without them the key is the TCP peer's address, which
	// is the only thing a client cannot forge.
	TrustedProxies []netip.Prefix
}

// ParseKeySource parses "client_ip", "header:X-Api-Key", "path" or
// "route". Trusted proxies are set separately (ParseTrustedProxies).
func ParseKeySource(s string) (KeySource, error) {
	kind, name, hasName := strings.Cut(s, ":")
	switch kind {
	case KeyClientIP, KeyPath, KeyRoute:
		if hasName {
			return KeySource{}, field.Errorf("key", "%q: %s takes no name", s, kind)
		}
		return KeySource{Kind: kind}, nil
	case KeyHeader:
		if name == "" {
			return KeySource{}, field.Errorf("key", "%q needs a header name, as in header:X-Api-Key", s)
		}
		if !isToken(name) {
			return KeySource{}, field.Errorf("key", "%q: %q is not a valid header name", s, name)
		}
		return KeySource{Kind: kind, Name: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	return KeySource{}, field.Errorf("key", "%q is unknown: want client_ip, header:NAME, path or route", s)
}

// ParseTrustedProxies parses IP addresses and CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32", "192.0.2.7") with ParsePrefix.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := ParsePrefix(s)
		if err != nil {
			return nil, field.Errorf(fmt.Sprintf("trusted_proxies[%d]", i), "%v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParsePrefix parses an IP address ("192.0.2.7", "2001:db8::1") or a CIDR
// prefix ("10.0.0.0/8") as a prefix, masked. IPv4-mapped IPv6 forms are
// stored as IPv4, the way Key (and ClientAddr) compare addresses.
func ParsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(s)
		if a.Zone() != "" { // PrefixFrom would drop it silently
			err = errors.New("zone")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// String returns the source in the form ParseKeySource reads.
func (k KeySource) String() string {
	if k.Kind == KeyHeader {
		return k.Kind + ":" + k.Name
	}
	return k.Kind
}

// Key returns r's key, and false when r has none: the header is absent
// (an empty header is a key like any other), or, for client_ip, the peer
// address cannot be parsed. route is the name of the route r matched.
//
// A proxy should not let a request without a key bypass a limit that
// clients can dodge by omitting a header: limit those requests under one
// shared key (for example "") instead.
//
// For client_ip the key is the TCP peer's address, unless the peer is one
// of TrustedProxies: then X-Forwarded-For is read from right to left,
// skipping trusted addresses, and the first untrusted one is the client.
// An entry that is not an address stops the walk at the last trusted one:
// everything left of it may have been written by the client. Addresses are
// normalised (IPv4-mapped IPv6 as IPv4, no zone), so that one client has
// one key. Key allocates nothing for a canonical IPv4 or IPv6 address.
func (k KeySource) Key(r *http.Request, route string) (string, bool) {
	switch k.Kind {
	case KeyClientIP:
		return clientIP(r.RemoteAddr, r.Header["X-Forwarded-For"], k.TrustedProxies)
	case KeyHeader:
		v := r.Header[k.Name]
		if len(v) == 0 {
			return "", false
		}
		return v[0], true
	case KeyPath:
		return r.URL.Path, true
	case KeyRoute:
		return route, true
	}
	return "", false
}

// ClientAddr returns the address of the client of a request that came
// from the peer remoteAddr (host:port) with the X-Forwarded-For lines xff,
// by the rule Key follows for client_ip: the peer, unless it is one of
// trusted; then X-Forwarded-For read from right to left, skipping trusted
// addresses (nginx's real_ip_recursive). The address is unmapped and has
// no zone. ok is false when remoteAddr is not an address. It allocates
// nothing.
func ClientAddr(remoteAddr string, xff []string, trusted []netip.Prefix) (a netip.Addr, ok bool) {
	_, a, ok = clientAddr(remoteAddr, xff, trusted)
	return a, ok
}

// clientIP implements Key for client_ip.
func clientIP(remoteAddr string, xff []string, trusted []netip.Prefix) (string, bool) {
	text, a, ok := clientAddr(remoteAddr, xff, trusted)
	if !ok {
		return "", false
	}
	return canonicalIP(text, a), true
}

// clientAddr implements ClientAddr, and returns the client's address as
// the text it was found in too.
func clientAddr(remoteAddr string, xff []string, trusted []netip.Prefix) (string, netip.Addr, bool) {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	addr, ok := parseIP(host)
	if !ok {
		return "", netip.Addr{}, false
	}
	if !isTrusted(addr, trusted) {
		return host, addr, true
	}
	// The peer is a trusted proxy: the hop before it is the last entry of
	// the last X-Forwarded-For line.
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for line != "" {
			entry := line
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				line = ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			a, ok := parseIP(entry)
			if !ok {
				return host, addr, true
			}
			host, addr = entry, a
			if !isTrusted(a, trusted) {
				return host, addr, true
			}
		}
	}
	// Every hop was trusted: the leftmost is the client.
	return host, addr, true
}

// parseIP parses an address as it appears in RemoteAddr's host part or an
// X-Forwarded-For entry: bare, or with a port ("192.0.2.1:5000",
// "[2001:db8::1]:5000"). It returns it unmapped and without zone.
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// canonicalIP returns a's text, reusing text (no allocation) when it
// already is exactly that.
func canonicalIP(text string, a netip.Addr) string {
	var buf [64]byte
	b := a.AppendTo(buf[:0])
	if string(b) == text {
		return text
	}
	return string(b)
}

// isToken reports whether s is an RFC 9110 token (a header name).
func isToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }
