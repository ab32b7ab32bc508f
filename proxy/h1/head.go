package h1

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The request-head fast path.
//
// http.ReadRequest costs about nine allocations for a plain GET: the
// Request, the request line, the URL, the transfer reader, the header map
// and one string per header value. Most requests a proxy sees are plain:
// an origin-form target, HTTP/1.1 or 1.0, a Host field, no body. For those
// parseRequestHead builds the same *http.Request itself in three or four:
// the Request together with its URL and the backing array of its header
// values (one allocation), one string holding the whole head (method,
// target, field names and values are all slices of it), and the header
// map.
//
// The fast path is a strict subset of http.ReadRequest: it takes a head
// only when every line of it is one it understands exactly, and for that
// head it produces the request http.ReadRequest would. Anything else (a
// body, framing fields, absolute-form or asterisk targets, escapes or
// other bytes in the path that net/url would rewrite, other versions,
// obs-fold, a field name outside the token characters, a missing,
// repeated or malformed Host, Pragma) is left to http.ReadRequest and the
// checks the server makes after it, unchanged. So the fast path can never
// accept what the standard parser refuses, nor read a request another
// way; FuzzRequestHeadMatchesNetHTTP holds it to that.

// maxFastFields is how many header values the fast path keeps in the
// request's own allocation; a head with more gets an array of its own.
const maxFastFields = 16

// reqBox is a request with its URL and the backing array of its header
// values: one allocation.
type reqBox struct {
	req  http.Request
	url  url.URL
	vals [maxFastFields]string
}

// fieldPos locates a header field in a head: the name is head[name:colon],
// the value head[val:end].
type fieldPos struct {
	name, colon, val, end int
}

// parseRequestHead parses a request head (the request line, the field
// lines and the blank line that ends them, as rawHead returns it) when it
// is one the fast path takes. ok is false when it is not: the caller then
// parses the same bytes with http.ReadRequest. fields is scratch space the
// caller keeps between requests.
func parseRequestHead(head []byte, fields *[]fieldPos) (req *http.Request, fr framing, ok bool) {
	// The request line: method SP origin-form SP version.
	eol := bytes.IndexByte(head, '\n')
	if eol < 0 {
		return nil, fr, false
	}
	line := trimCR(head[:eol])
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 || !isToken(line[:sp1]) {
		return nil, fr, false
	}
	sp2 := bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 < 0 {
		return nil, fr, false
	}
	sp2 += sp1 + 1
	target, version := line[sp1+1:sp2], line[sp2+1:]
	var minor int
	switch string(version) {
	case "HTTP/1.1":
		minor = 1
	case "HTTP/1.0":
	default:
		return nil, fr, false
	}
	pathEnd, ok := originForm(target)
	if !ok {
		return nil, fr, false
	}

	// The fields.
	fs := (*fields)[:0]
	host := -1
	for i := eol + 1; ; {
		j := bytes.IndexByte(head[i:], '\n')
		if j < 0 {
			return nil, fr, false
		}
		line := trimCR(head[i : i+j])
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) || !validValue(line[colon+1:]) {
			return nil, fr, false // includes obs-fold: a line starting with SP or HTAB
		}
		v, e := colon+1, len(line)
		for v < e && (line[v] == ' ' || line[v] == '\t') {
			v++
		}
		for e > v && (line[e-1] == ' ' || line[e-1] == '\t') {
			e--
		}
		name := line[:colon]
		switch {
		case asciiEqualFold(name, "Host"):
			if host >= 0 {
				return nil, fr, false
			}
			host = len(fs)
		case asciiEqualFold(name, "Content-Length"), asciiEqualFold(name, "Transfer-Encoding"),
			asciiEqualFold(name, "Trailer"), asciiEqualFold(name, "Pragma"):
			return nil, fr, false
		}
		fs = append(fs, fieldPos{name: i, colon: i + colon, val: i + v, end: i + e})
		i += j + 1
	}
	*fields = fs
	if host < 0 {
		return nil, fr, false
	}
	if hv := fs[host]; !httpguts.ValidHostHeader(string(head[hv.val:hv.end])) {
		return nil, fr, false
	}

	// Accepted: one string for all the head's text, field names in
	// canonical form.
	var sb strings.Builder
	sb.Grow(len(head))
	last := 0
	for _, f := range fs {
		sb.Write(head[last:f.name])
		upper := true
		for _, c := range head[f.name:f.colon] {
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			sb.WriteByte(c)
			upper = c == '-'
		}
		last = f.colon
	}
	sb.Write(head[last:])
	s := sb.String()

	box := new(reqBox)
	vals := box.vals[:]
	if len(fs) > len(vals) {
		vals = make([]string, len(fs))
	}
	h := make(http.Header, len(fs)-1)
	for k, f := range fs {
		if k == host {
			continue // in r.Host, not in the header, as with http.ReadRequest
		}
		name, v := s[f.name:f.colon], s[f.val:f.end]
		if vv, dup := h[name]; dup {
			h[name] = append(vv, v)
			continue
		}
		vals[k] = v
		h[name] = vals[k : k+1 : k+1]
	}
	r := &box.req
	r.Method = s[:sp1]
	r.RequestURI = s[sp1+1 : sp2]
	u := &box.url
	u.Path = s[sp1+1 : sp1+1+pathEnd]
	if pathEnd < len(target) {
		u.RawQuery = s[sp1+1+pathEnd+1 : sp2]
	}
	r.URL = u
	r.ProtoMajor, r.ProtoMinor = 1, minor
	r.Proto = "HTTP/1.0"
	if minor == 1 {
		r.Proto = "HTTP/1.1"
	}
	r.Header = h
	r.Host = s[fs[host].val:fs[host].end]
	r.Body = http.NoBody
	conn := h["Connection"]
	r.Close = httpguts.HeaderValuesContainsToken(conn, "close") ||
		minor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	return r, framing{host: true}, true
}

// originForm reports whether target is an origin-form request target
// (RFC 9112 3.2.1) that net/url keeps as it is: a path of characters that
// need no escaping, and a non-empty query of visible ASCII. end is the
// length of the path.
func originForm(target []byte) (end int, ok bool) {
	if len(target) == 0 || target[0] != '/' {
		return 0, false
	}
	end = len(target)
	for i, c := range target {
		if c == '?' {
			end = i
			break
		}
		if !isPathByte(c) {
			return 0, false
		}
	}
	if end < len(target) {
		q := target[end+1:]
		if len(q) == 0 {
			return 0, false // "?" alone: url.URL.ForceQuery
		}
		for _, c := range q {
			if c <= ' ' || c >= 0x7f {
				return 0, false
			}
		}
	}
	return end, true
}

// isPathByte reports whether c may stand in a path as it is: net/url
// neither unescapes it nor would escape it (so URL.RawPath stays empty).
func isPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '~', '$', '&', '+', ',', '/', ':', ';', '=', '@':
		return true
	}
	return false
}

// isToken reports whether b is a non-empty token (RFC 9110 5.6.2): the
// syntax of methods and field names.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// validValue reports whether b holds only field-value bytes: no control
// characters but HTAB (so no CR, LF or NUL), DEL neither; obs-text is
// allowed, as net/textproto allows it.
func validValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}
