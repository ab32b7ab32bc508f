package httpproxy

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
)

// Request paths are put in one normal form before routing, and that form
// is what the upstream receives: a path that routes as /public must not
// reach the upstream as /admin. The rules (docs/architecture.md, "Request
// paths"):
//
//   - percent-encoded unreserved characters (RFC 3986 2.3: letters,
//     digits, "-", ".", "_", "~") are decoded: %2e is ".", %7E is "~";
//   - every other percent-encoding is kept as it came, %2F and %5C
//     included: an encoded slash is data, not a separator;
//   - runs of slashes become one ("//a//b" is "/a/b"), before dot-segments
//     are resolved, as nginx does;
//   - "." segments are dropped and ".." removes the segment before it
//     (RFC 3986 5.2.4); a ".." that would climb above the root is refused
//     (400), as nginx refuses it;
//   - the query is not touched.
//
// A path already in normal form is returned as it is, without allocating.

// normalizePath returns the normal form of p, an escaped request path
// starting with "/". ok is false when p climbs above the root or holds a
// malformed percent-encoding.
func normalizePath(p string) (norm string, ok bool) {
	if !needsNormalizing(p) {
		return p, true
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return "", false
		}
		if d := unhex(p[i+1])<<4 | unhex(p[i+2]); isUnreserved(d) {
			b = append(b, d)
		} else {
			b = append(b, p[i:i+3]...)
		}
		i += 2
	}
	// Resolve the segments in place: what is written never overtakes what
	// is still to be read.
	out := b[:0]
	trailing := false // the path ends in a directory: keep its final "/"
	for i := 0; i < len(b); {
		j := i + 1
		for j < len(b) && b[j] != '/' {
			j++
		}
		seg := b[i+1 : j]
		switch string(seg) {
		case "", ".":
			trailing = j == len(b)
		case "..":
			k := bytes.LastIndexByte(out, '/')
			if k < 0 {
				return "", false
			}
			out = out[:k]
			trailing = j == len(b)
		default:
			out = append(out, '/')
			out = append(out, seg...)
			trailing = false
		}
		i = j
	}
	if trailing || len(out) == 0 {
		out = append(out, '/')
	}
	return string(out), true
}

// needsNormalizing reports whether p differs from its normal form: it has
// an empty, "." or ".." segment, or a percent-encoding that is either
// malformed or of an unreserved character.
func needsNormalizing(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '/':
			rest := p[i+1:]
			if rest == "" {
				continue
			}
			if rest[0] == '/' {
				return true
			}
			if rest[0] == '.' {
				seg := rest
				if k := strings.IndexByte(rest, '/'); k >= 0 {
					seg = rest[:k]
				}
				if seg == "." || seg == ".." {
					return true
				}
			}
		case '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) ||
				isUnreserved(unhex(p[i+1])<<4|unhex(p[i+2])) {
				return true
			}
		}
	}
	return false
}

// normalizeRequest puts r's path in normal form (normalizePath) and keeps
// r.URL.Path (what routes match), r.URL.RawPath and r.RequestURI (what the
// HTTP/1 engine sends upstream, h1.RequestURI) in agreement with it. It
// reports false when the path cannot be normalised. A request target that
// is not a path ("*" of OPTIONS) is left alone.
func normalizeRequest(r *http.Request) bool {
	var raw, query string
	hasQuery := false
	switch u := r.RequestURI; {
	case u != "" && u[0] == '/': // origin form, and HTTP/2's :path
		raw, query, hasQuery = strings.Cut(u, "?")
	case r.URL.Opaque == "" && (r.URL.Path == "" || r.URL.Path[0] == '/'): // absolute form
		raw = r.URL.EscapedPath()
		if raw == "" {
			raw = "/"
		}
		query, hasQuery = r.URL.RawQuery, r.URL.ForceQuery || r.URL.RawQuery != ""
	default:
		return true
	}
	norm, ok := normalizePath(raw)
	if !ok {
		return false
	}
	if norm == raw && r.URL.Path != "" {
		return true
	}
	path, err := url.PathUnescape(norm)
	if err != nil {
		return false
	}
	r.URL.Path, r.URL.RawPath = path, ""
	if strings.IndexByte(norm, '%') >= 0 {
		r.URL.RawPath = norm
	}
	if hasQuery {
		r.RequestURI = norm + "?" + query
	} else {
		r.RequestURI = norm
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// isUnreserved reports whether c is an unreserved character of RFC 3986
// (2.3), which percent-encoding does not change the meaning of.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
