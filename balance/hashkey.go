package balance

import (
	"net"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-dev/switchboard/field"
)

// The sources a hash key can come from.
const (
	HashKeyHeader   = "header"    // header:NAME, the value of request header NAME
	HashKeyCookie   = "cookie"    // cookie:NAME, the value of cookie NAME
	HashKeyClientIP = "client_ip" // the client's IP address (without port)
	HashKeyPath     = "path"      // the request path (without query)
	HashKeyQuery    = "query"     // query:NAME, the first value of query parameter NAME
)

// HashKey says where the proxy finds a request's key for consistent_hash
// and maglev. It is written as header:NAME, cookie:NAME, client_ip, path or
// query:NAME. The proxy extracts the key and sets Info.Key; a request
// without one (no such header, cookie or parameter) gets Info.HasKey false
// and goes to the policy's Fallback, or gets ErrNoHashKey with MissingKey
// "error". An empty header, cookie or parameter value is a key like any
// other.
type HashKey struct {
	// Source is HashKeyHeader, HashKeyCookie, HashKeyClientIP, HashKeyPath
	// or HashKeyQuery.
	Source string
	// Name is the header name (in canonical form, X-User-Id), the cookie
	// name or the query parameter name; empty for client_ip and path.
	Name string
}

// ParseHashKey parses "header:X-User-Id", "cookie:sid", "client_ip",
// "path" or "query:q". Its error is a *field.Error at hash_key.
func ParseHashKey(s string) (HashKey, error) {
	src, name, hasName := strings.Cut(s, ":")
	switch src {
	case HashKeyClientIP, HashKeyPath:
		if hasName {
			return HashKey{}, field.Errorf("hash_key", "%q: %s takes no name", s, src)
		}
		return HashKey{Source: src}, nil
	case HashKeyHeader, HashKeyCookie, HashKeyQuery:
		if name == "" {
			return HashKey{}, field.Errorf("hash_key", "%q needs a name, as in %s:NAME", s, src)
		}
		if src == HashKeyQuery {
			if strings.ContainsAny(name, " \t\r\n&=#?") {
				return HashKey{}, field.Errorf("hash_key", "%q: %q is not a query parameter name", s, name)
			}
			return HashKey{Source: src, Name: name}, nil
		}
		if !isToken(name) {
			return HashKey{}, field.Errorf("hash_key", "%q: %q is not a valid %s name", s, name, src)
		}
		if src == HashKeyHeader {
			name = textproto.CanonicalMIMEHeaderKey(name)
		}
		return HashKey{Source: src, Name: name}, nil
	}
	return HashKey{}, field.Errorf("hash_key", "%q is unknown: want header:NAME, cookie:NAME, client_ip, path or query:NAME", s)
}

// String returns the key in the form ParseHashKey reads.
func (k HashKey) String() string {
	if k.Name == "" {
		return k.Source
	}
	return k.Source + ":" + k.Name
}

// isToken reports whether s is an RFC 9110 token (header and cookie names).
func isToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// FromRequest extracts the key of r, or reports false when r carries none
// (no such header, cookie or query parameter).
func (k *HashKey) FromRequest(r *http.Request) (string, bool) {
	switch k.Source {
	case HashKeyHeader:
		if v := r.Header[k.Name]; len(v) > 0 {
			return v[0], true
		}
	case HashKeyCookie:
		if c, err := r.Cookie(k.Name); err == nil {
			return c.Value, true
		}
	case HashKeyClientIP:
		// The direct peer: X-Forwarded-For is the client's to write.
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host, true
		}
	case HashKeyPath:
		return r.URL.Path, true
	case HashKeyQuery:
		if vs, ok := r.URL.Query()[k.Name]; ok && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}
