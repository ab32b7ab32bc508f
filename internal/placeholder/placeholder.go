// Package placeholder parses the templates of switchboard's rewrite rules:
// header values and redirect targets such as "https://{host}{path}" or
// "{client_ip}", in which each {name} stands for a value of the request
// being served. A template is parsed once, when the configuration loads
// (an unknown name is an error then), into parts that a front end renders
// per request without parsing again.
//
// Syntax: "{name}" is a placeholder; "{{" and "}}" are a literal "{" and
// "}"; any other "}" is literal. The names:
//
//	{client_ip}    the client's IP address (the connection's peer)
//	{request_id}   the request's X-Request-Id, the client's or the one made for it
//	{host}         the Host the client asked for, without its port
//	{hostport}     the Host the client asked for, as it came
//	{path}         the request's path as the client asked for it (normalised, escaped, no query)
//	{query}        the request's query, without "?" ("" for none)
//	{method}       the request method
//	{scheme}       http or https, as the client connected
//	{upstream}     the route's upstream
//	{endpoint}     the endpoint that answered (host:port); known only once one was picked
//	{header.NAME}  the first value of the request header NAME ("" if absent)
package placeholder

import (
	"fmt"
	"net/textproto"
	"strings"
)

// Kind is what one part of a template stands for.
type Kind uint8

// The kinds of parts. Literal is text taken as it is; Header's part names
// the header; the others are the placeholders of the package doc.
const (
	Literal Kind = iota
	ClientIP
	RequestID
	Host
	HostPort
	Path
	Query
	Method
	Scheme
	Upstream
	Endpoint
	Header
)

// names maps a placeholder's name to its kind; Header's "header.NAME" is
// matched apart.
var names = map[string]Kind{
	"client_ip":  ClientIP,
	"request_id": RequestID,
	"host":       Host,
	"hostport":   HostPort,
	"path":       Path,
	"query":      Query,
	"method":     Method,
	"scheme":     Scheme,
	"upstream":   Upstream,
	"endpoint":   Endpoint,
}

// Known lists the placeholders, for error messages.
const Known = "{client_ip}, {request_id}, {host}, {hostport}, {path}, {query}, {method}, {scheme}, {upstream}, {endpoint}, {header.NAME}"

// String returns the placeholder as written ("{host}"); "literal" for
// Literal and "{header.NAME}" for Header.
func (k Kind) String() string {
	switch k {
	case Literal:
		return "literal"
	case Header:
		return "{header.NAME}"
	}
	for n, kk := range names {
		if kk == k {
			return "{" + n + "}"
		}
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Part is one piece of a template: literal text, or a placeholder. Text
// is the literal's text, or for Header the header's canonical name.
type Part struct {
	Kind Kind
	Text string
}

// Template is a parsed template: its parts in order, adjacent literals
// merged. The zero Template renders as "".
type Template struct {
	Parts []Part
}

// Parse parses s. Its errors name the offending placeholder and read as
// the end of a sentence about the value ("has an unknown placeholder ...").
func Parse(s string) (Template, error) {
	var t Template
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.Parts = append(t.Parts, Part{Kind: Literal, Text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return Template{}, fmt.Errorf(`has a "{" at byte %d that is not closed (write "{{" for a literal "{")`, i)
			}
			name := s[i+1 : i+1+end]
			p, err := part(name)
			if err != nil {
				return Template{}, err
			}
			flush()
			t.Parts = append(t.Parts, p)
			i += end + 1
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, nil
}

func part(name string) (Part, error) {
	if k, ok := names[name]; ok {
		return Part{Kind: k}, nil
	}
	if h, ok := strings.CutPrefix(name, "header."); ok {
		if !isToken(h) {
			return Part{}, fmt.Errorf("has placeholder {%s}, whose header name %q is not a valid header name", name, h)
		}
		return Part{Kind: Header, Text: textproto.CanonicalMIMEHeaderKey(h)}, nil
	}
	return Part{}, fmt.Errorf("has an unknown placeholder {%s} (known: %s)", name, Known)
}

// Literal returns the template's text when it has no placeholder.
func (t Template) Literal() (string, bool) {
	switch len(t.Parts) {
	case 0:
		return "", true
	case 1:
		if t.Parts[0].Kind == Literal {
			return t.Parts[0].Text, true
		}
	}
	return "", false
}

// Uses reports whether the template has a placeholder of kind k.
func (t Template) Uses(k Kind) bool {
	for _, p := range t.Parts {
		if p.Kind == k {
			return true
		}
	}
	return false
}

// Render returns the template's text with each placeholder replaced by
// value(part). It allocates; a front end on the request path renders the
// parts itself into a buffer it owns.
func (t Template) Render(value func(Part) string) string {
	var b strings.Builder
	for _, p := range t.Parts {
		if p.Kind == Literal {
			b.WriteString(p.Text)
		} else {
			b.WriteString(value(p))
		}
	}
	return b.String()
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
