package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync"
	"unsafe"

	"golang.org/x/net/http/httpguts"
)

// The head fast paths.
//
// http.ReadRequest costs nine allocations for a plain GET (the Request,
// the request line, the URL, the transfer reader, the header map and one
// string per header value), http.ReadResponse eleven for a small
// response. Most messages a proxy sees are plain: a request with an
// origin-form target, HTTP/1.1 or 1.0, a Host field, no body or one of a
// given length; a response with a Content-Length. For those
// parseRequestHead and parseResponseHead build the same *http.Request or
// *http.Response themselves, in three allocations: the message together
// with its URL or body reader, the backing array of its header values and
// the head's text (method, target, field names and values are all slices
// of that text); and the header map (two).
//
// Each fast path is a strict subset of the standard parser: it takes a
// head only when every line of it is one it understands exactly, and for
// that head it produces the message the standard parser would, with a
// body that reads the same bytes and ends the same way. Anything else
// (chunking, absolute-form or asterisk targets, escapes or other bytes in
// the path that net/url would rewrite, other versions, obs-fold, a field
// name outside the token characters, a missing, empty, repeated or
// malformed Host, repeated or unusual Content-Length, Trailer, Pragma,
// and on the response side 1xx, 204, 304, HEAD, Connection: close, a
// body read to the close) is left to http.ReadRequest or http.ReadResponse and the
// checks after them, unchanged. So a fast path can never accept what the
// standard parser refuses, nor read a message another way;
// FuzzRequestHeadMatchesNetHTTP and FuzzResponseHeadMatchesNetHTTP hold
// them to that on the same bytes.

// maxFastFields is how many header values the fast path keeps in the
// request's own allocation; a head with more gets an array of its own.
const maxFastFields = 12

// maxFastText is how long a head may be for its text to be kept in the
// message's own allocation; a longer one gets an array of its own.
const maxFastText = 384

// reqBox is a request with its URL, its body reader, the backing array
// of its header values and its text: one allocation.
type reqBox struct {
	req  http.Request
	url  url.URL
	body lengthBody
	vals [maxFastFields]string
	text [maxFastText]byte
}

// fieldPos locates a header field in a head: the name is head[name:colon],
// the value head[val:end]. kind says which of the fields the fast paths
// look at it is.
type fieldPos struct {
	name, colon, val, end int
	kind                  fieldKind
	canonical             bool // the name is in canonical form already
}

type fieldKind uint8

const (
	fieldOther fieldKind = iota
	fieldHost
	fieldContentLength
	fieldTransferEncoding
	fieldTrailer
	fieldPragma
	fieldConnection
)

// scanFields reads the field lines of head from offset i up to the blank
// line that ends them, appending each to fs. ok is false when a line is
// not one the fast paths take: a name that is not a token (or none), a
// value with a control character other than HTAB (so no CR, LF or NUL),
// a continuation line (obs-fold), a head without its blank line.
func scanFields(head []byte, i int, fs []fieldPos) (_ []fieldPos, ok bool) {
	for {
		j := bytes.IndexByte(head[i:], '\n')
		if j < 0 {
			return fs, false
		}
		line := trimCR(head[i : i+j])
		if len(line) == 0 {
			return fs, true
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return fs, false
		}
		token, canonical := scanName(line[:colon])
		if !token || !validValue(line[colon+1:]) {
			return fs, false // includes obs-fold: a line starting with SP or HTAB
		}
		v, e := colon+1, len(line)
		for v < e && (line[v] == ' ' || line[v] == '\t') {
			v++
		}
		for e > v && (line[e-1] == ' ' || line[e-1] == '\t') {
			e--
		}
		fs = append(fs, fieldPos{name: i, colon: i + colon, val: i + v, end: i + e, kind: kindOf(line[:colon]), canonical: canonical})
		i += j + 1
	}
}

func kindOf(name []byte) fieldKind {
	switch len(name) {
	case len("Host"):
		if asciiEqualFold(name, "Host") {
			return fieldHost
		}
	case len("Content-Length"):
		if asciiEqualFold(name, "Content-Length") {
			return fieldContentLength
		}
	case len("Transfer-Encoding"):
		if asciiEqualFold(name, "Transfer-Encoding") {
			return fieldTransferEncoding
		}
	case len("Trailer"):
		if asciiEqualFold(name, "Trailer") {
			return fieldTrailer
		}
	case len("Pragma"):
		if asciiEqualFold(name, "Pragma") {
			return fieldPragma
		}
	case len("Connection"):
		if asciiEqualFold(name, "Connection") {
			return fieldConnection
		}
	}
	return fieldOther
}

// headText returns head as one string, its field names in canonical form
// (as net/textproto writes them): every string of a parsed head is a slice
// of it, so the head's text costs at most one allocation. When the head
// fits in buf, the string is made over buf, which costs none: buf is part
// of the message's own allocation, written here once and never again, so
// the string stays immutable (but for a message parsed with a Reuse,
// whose memory is the Reuse's: see Reuse).
func headText(head []byte, fs []fieldPos, buf []byte) string {
	if len(head) > len(buf) {
		buf = make([]byte, len(head))
	}
	buf = buf[:len(head)]
	copy(buf, head)
	for _, f := range fs {
		if f.canonical {
			continue // as most senders write them
		}
		upper := true
		for i := f.name; i < f.colon; i++ {
			c := buf[i]
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
			upper = c == '-'
		}
	}
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

// buildHeader makes the header of fields fs of head text s, but for the
// field at index skip (-1: none). The values of the first len(vals) fields
// are held in vals. The header is h, emptied first, when h is not nil.
func buildHeader(s string, fs []fieldPos, skip int, vals []string, h http.Header) http.Header {
	n := len(fs)
	if skip >= 0 {
		n--
	}
	if len(fs) > len(vals) {
		vals = make([]string, len(fs))
	}
	if h == nil {
		h = make(http.Header, n)
	} else {
		clear(h)
	}
	// Names rarely repeat: each field is stored without looking first (one
	// hash of its name, not two), and a header with fewer names than
	// fields, where a later field replaced an earlier one's values, is
	// built again keeping them all.
	for k, f := range fs {
		if k != skip {
			vals[k] = s[f.val:f.end]
			h[s[f.name:f.colon]] = vals[k : k+1 : k+1]
		}
	}
	if len(h) == n {
		return h
	}
	clear(h)
	for k, f := range fs {
		if k == skip {
			continue
		}
		name := s[f.name:f.colon]
		if vv, dup := h[name]; dup {
			h[name] = append(vv, vals[k])
			continue
		}
		h[name] = vals[k : k+1 : k+1]
	}
	return h
}

// parseRequestHead parses a request head (the request line, the field
// lines and the blank line that ends them, as rawHead returns it) when it
// is one the fast path takes. A body (Content-Length) is read from br,
// after the head. ok is false when the head is not one the fast path
// takes: the caller then parses the same bytes with http.ReadRequest.
//
// With ru, the request is a copy of ru.Base and its header is ru's map
// (see Reuse).
func parseRequestHead(head []byte, br *bufio.Reader, ru *Reuse) (req *http.Request, fr framing, ok bool) {
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

	var fa [maxFastFields]fieldPos
	fs, ok := scanFields(head, eol+1, fa[:0])
	if !ok {
		return nil, fr, false
	}
	host, cl := -1, -1
	for k, f := range fs {
		switch f.kind {
		case fieldHost:
			if host >= 0 {
				return nil, fr, false
			}
			host = k
		case fieldContentLength:
			if cl >= 0 {
				return nil, fr, false
			}
			cl = k
		case fieldTransferEncoding, fieldTrailer, fieldPragma:
			return nil, fr, false
		}
	}
	if host < 0 {
		return nil, fr, false
	}
	var n int64
	if cl >= 0 {
		if n, ok = contentLength(head[fs[cl].val:fs[cl].end]); !ok {
			return nil, fr, false
		}
	}
	// An empty Host is valid syntax, but the server's checks refuse it
	// on HTTP/1.1 (as a missing one): left to them, so that what the fast
	// path takes needs no check on Host after it (ParseRequestHead).
	if hv := fs[host]; hv.val == hv.end || !httpguts.ValidHostHeader(string(head[hv.val:hv.end])) {
		return nil, fr, false
	}

	// Accepted.
	box := ru.reqBox()
	s := headText(head, fs, box.text[:])
	// Host is in r.Host, not in the header, as with http.ReadRequest.
	h := buildHeader(s, fs, host, box.vals[:], ru.header())
	r := &box.req
	if ru != nil && ru.Base != nil {
		*r = *ru.Base
	}
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
	r.ContentLength = n
	r.Body = http.NoBody
	if n > 0 {
		box.body = lengthBody{r: br, n: n}
		r.Body = &box.body
	}
	conn := h["Connection"]
	r.Close = httpguts.HeaderValuesContainsToken(conn, "close") ||
		minor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	return r, framing{host: true, contentLength: cl >= 0}, true
}

// respBox is a response with its body, the backing array of its header
// values and its text: one allocation.
type respBox struct {
	resp http.Response
	body lengthBody
	vals [maxFastFields]string
	text [maxFastText]byte
}

// parseResponseHead parses a response head (the status line, the field
// lines and the blank line, as rawHead returns it) to req when it is one
// the fast path takes: HTTP/1.1, a status from 200 to 599 other than 204
// and 304, one Content-Length, no Transfer-Encoding, Trailer or Pragma, no
// Connection: close, and a request other than HEAD. Its body is read from
// br, after the head. ok is false when the head is not one the fast path
// takes: the caller then parses the same bytes with http.ReadResponse.
//
// With ru, the response's header is ru's map (see Reuse).
func parseResponseHead(head []byte, req *http.Request, br *bufio.Reader, ru *Reuse) (resp *http.Response, ok bool) {
	if req == nil || req.Method == http.MethodHead {
		return nil, false
	}
	eol := bytes.IndexByte(head, '\n')
	if eol < 0 {
		return nil, false
	}
	line := trimCR(head[:eol])
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto ||
		len(line) > len(proto)+3 && line[len(proto)+3] != ' ' {
		return nil, false
	}
	code := 0
	for _, c := range line[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}

	var fa [maxFastFields]fieldPos
	fs, ok := scanFields(head, eol+1, fa[:0])
	if !ok {
		return nil, false
	}
	cl := -1
	for k, f := range fs {
		switch f.kind {
		case fieldContentLength:
			if cl >= 0 {
				return nil, false
			}
			cl = k
		case fieldTransferEncoding, fieldTrailer, fieldPragma:
			return nil, false
		case fieldConnection:
			if hasToken(head[f.val:f.end], "close") {
				return nil, false
			}
		}
	}
	if cl < 0 {
		return nil, false
	}
	n, ok := contentLength(head[fs[cl].val:fs[cl].end])
	if !ok {
		return nil, false
	}

	// Accepted.
	box := ru.respBox()
	s := headText(head, fs, box.text[:])
	r := &box.resp
	r.Status = s[len(proto):len(line)]
	r.StatusCode = code
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = buildHeader(s, fs, -1, box.vals[:], ru.header())
	r.ContentLength = n
	r.Body = http.NoBody
	if n > 0 {
		box.body = lengthBody{r: br, n: n}
		r.Body = &box.body
	}
	r.Request = req
	return r, true
}

// contentLength returns the length a Content-Length value gives when it
// is one the fast paths take: 1 to 18 digits, nothing else (net/http also
// takes 19).
func contentLength(v []byte) (n int64, ok bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasToken reports whether v, a comma-separated list, holds token tok
// (ASCII case-insensitive), as httpguts.HeaderValuesContainsToken reads
// it.
func hasToken(v []byte, tok string) bool {
	if len(v) == len("keep-alive") && asciiEqualFold(v, "keep-alive") {
		return tok == "keep-alive" // the common Connection value, in one comparison
	}
	for len(v) > 0 {
		t, rest, _ := bytes.Cut(v, []byte{','})
		if asciiEqualFold(bytes.Trim(t, " \t"), tok) {
			return true
		}
		v = rest
	}
	return false
}

// lengthBody is a message body of a known length, read from the
// connection's buffered reader, as net/http reads one: it ends with io.EOF
// (returned with its last bytes) after n bytes, or with
// io.ErrUnexpectedEOF when the connection ends first. Close does not
// drain it: the client's Body decides what becomes of the connection.
type lengthBody struct {
	// mu makes Read and Close safe to call from two goroutines at once,
	// as net/http's body is: a transport may still read a request's body
	// after the handler returned while the server drains it, and both
	// read the connection's buffer (without it they could read past the
	// length and garble the next request on the connection).
	mu     sync.Mutex
	r      *bufio.Reader
	n      int64 // bytes left
	closed bool
}

func (b *lengthBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
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

// Classes of a field name's bytes, for scanName.
const (
	nameToken = 1 << iota // a tchar (RFC 9110)
	nameLower             // a to z
	nameUpper             // A to Z
	nameDash              // '-'
)

// nameClass holds the name classes of every byte.
var nameClass = func() (t [256]uint8) {
	for c := range 256 {
		if httpguts.IsTokenRune(rune(c)) {
			t[c] |= nameToken
		}
		switch {
		case 'a' <= c && c <= 'z':
			t[c] |= nameLower
		case 'A' <= c && c <= 'Z':
			t[c] |= nameUpper
		case c == '-':
			t[c] |= nameDash
		}
	}
	return t
}()

// scanName reports whether b, a field name, is a token, and whether it is
// in canonical form already (as net/textproto writes it: a capital after
// the start and each '-', small letters elsewhere), in one pass: headText
// then rewrites only the names that are not.
func scanName(b []byte) (token, canonical bool) {
	if len(b) == 0 {
		return false, false
	}
	var all, wrong uint8 = nameToken, 0
	want := uint8(nameLower) // the case that would be wrong here
	for _, c := range b {
		k := nameClass[c]
		all &= k
		wrong |= k & want
		want = nameUpper
		if k&nameDash != 0 {
			want = nameLower
		}
	}
	return all != 0, wrong == 0
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
