package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// HeadEnd returns the length of the message head (start line, field
// lines and the empty line that ends them) at the start of b, or -1 when
// b does not hold all of it yet. Lines end at LF, with or without CR
// before it, as the parsers read them.
func HeadEnd(b []byte) int { return headEnd(b) }

// ParseRequestHead parses head, a whole request head as HeadEnd delimits
// it, with the server's fast parser: ok is false for every head the fast
// path does not take (see the package doc: anything but an origin-form
// target, HTTP/1.0 or 1.1, token names and clean values, exactly one valid
// non-empty Host, at most one plain Content-Length, no Transfer-Encoding, Trailer or
// Pragma). A caller that gets false gives the same bytes to Server (an
// event loop hands the connection over), which parses them with
// http.ReadRequest and its checks: so what this accepts is a strict subset
// of what the server accepts, read the same way. (Server's checks after
// parsing, on Expect and CONNECT, are the caller's.)
//
// The request's ContentLength is the head's; its Body is http.NoBody, for
// the caller to replace with the body it reads. The request keeps no
// reference to head.
func ParseRequestHead(head []byte) (req *http.Request, ok bool) {
	return ParseRequestHeadReusing(head, nil)
}

// Reuse is what a caller that has one message at a time in hand (an event
// loop's connection, serving its requests in turn) keeps from one parse to
// the next. The header map is Reuse's, emptied and filled again. A
// request costs no allocation: it lives in Reuse's memory, strings
// included, and is made as a copy of Base, which gives it Base's context
// without the copy Request.WithContext makes. A response lives in Reuse's
// memory too (see ParseResponseHeadReusing). A message parsed with a Reuse
// is valid until the next parse of the same kind with the same Reuse:
// whatever keeps one of its strings longer (a limiter's key, a log line
// written later) keeps a copy. The zero Reuse is ready to use.
type Reuse struct {
	// Base is the request each parsed request starts as a copy of; nil:
	// none (the context is then Background).
	Base *http.Request
	h    http.Header
	req  *reqBox
	resp *respBox
}

// reqBox is the allocation a request parsed with ru lives in: ru's own
// when ru is not nil (ParseRequestHeadReusing), emptied, else a new one.
func (ru *Reuse) reqBox() *reqBox {
	if ru == nil {
		return new(reqBox)
	}
	if ru.req == nil {
		ru.req = new(reqBox)
	} else {
		b := ru.req
		b.req, b.url, b.body, b.vals = http.Request{}, url.URL{}, lengthBody{}, [maxFastFields]string{}
	}
	return ru.req
}

// respBox is the allocation a response parsed with ru lives in: ru's own
// when ru is not nil (ParseResponseHeadReusing), emptied, else a new one.
func (ru *Reuse) respBox() *respBox {
	if ru == nil {
		return new(respBox)
	}
	if ru.resp == nil {
		ru.resp = new(respBox)
	} else {
		*ru.resp = respBox{}
	}
	return ru.resp
}

// header is the map to fill, nil when ru is nil.
func (ru *Reuse) header() http.Header {
	if ru == nil {
		return nil
	}
	if ru.h == nil {
		// 8: a small map, whose clear (once per message) is cheap; a
		// head with more fields grows it once.
		ru.h = make(http.Header, 8)
	}
	return ru.h
}

// ParseRequestHeadReusing is ParseRequestHead with ru's memory, map and
// base request (nil: ParseRequestHead's own).
func ParseRequestHeadReusing(head []byte, ru *Reuse) (req *http.Request, ok bool) {
	req, _, ok = parseRequestHead(head, nil, ru)
	if !ok {
		return nil, false
	}
	req.Body = http.NoBody
	return req, true
}

// ParseResponseHead parses head, a whole response head as HeadEnd
// delimits it, answering req, with the client's fast parser (HTTP/1.1, a
// status from 200 to 599 other than 204 and 304, one Content-Length, no
// Transfer-Encoding, Trailer, Pragma or Connection: close, not an answer
// to HEAD), and else with http.ReadResponse. The response's Body is
// http.NoBody: the caller reads the body itself, framed by
// ContentLength (-1: unknown) and TransferEncoding as http.ReadResponse
// sets them, and by BodylessResponse. The response keeps no reference to
// head.
func ParseResponseHead(head []byte, req *http.Request) (*http.Response, error) {
	return ParseResponseHeadReusing(head, req, nil)
}

// ParseResponseHeadReusing is ParseResponseHead with ru's header map and
// ru's allocation for the response itself (ru.Base is not used): a parse
// on the fast path costs nothing, and as with a request (Reuse), the
// response's strings (Status, the header's values) are over ru's memory,
// so they change at the next parse with ru: the caller must be done with
// all of them by then, and must not hand them to anything that keeps them.
// (h1loop relays a response's head and forgets it; a load report read from
// it is parsed at once.)
func ParseResponseHeadReusing(head []byte, req *http.Request, ru *Reuse) (*http.Response, error) {
	if resp, ok := parseResponseHead(head, req, nil, ru); ok {
		resp.Body = http.NoBody
		return resp, nil
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(bytes.NewReader(bytes.Clone(head)), len(head)+16), req)
	if err != nil {
		return nil, err
	}
	resp.Body = http.NoBody
	if resp.Close && resp.Header["Connection"] == nil && namesFields(head) {
		// As Client does: the fields a Connection: close names are
		// hop-by-hop too, so the caller needs the field.
		if v := connectionField(head); v != nil {
			resp.Header["Connection"] = v
		}
	}
	return resp, nil
}

// BodylessResponse reports whether a response with status code, answering
// a request of method, has no body whatever its fields say (RFC 9112 6.3):
// an answer to HEAD, 1xx, 204 and 304.
func BodylessResponse(method string, code int) bool {
	return method == http.MethodHead || code/100 == 1 || code == http.StatusNoContent || code == http.StatusNotModified
}

// HopByHopResponseField reports whether response field k (canonical) is
// not to be relayed to the client (RFC 9110 7.6.1), with conn the
// response's Connection field: Connection itself and every field it
// names, the fields hop-by-hop by definition, and Proxy-Authenticate and
// Proxy-Authorization, which are for the proxy, not the client.
//
// A caller that asks for every field of one response passes conn through
// ConnectionNames first.
func HopByHopResponseField(k string, conn []string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return len(conn) > 0 && httpguts.HeaderValuesContainsToken(conn, k)
}

// ConnectionNames returns conn, a response's Connection field, when it
// names a field other than Keep-Alive, and nil when it names none (as
// "keep-alive", the usual value, does: Keep-Alive is hop-by-hop anyway).
// HopByHopResponseField gives the same answers with either, without
// looking through conn for each field of the response.
func ConnectionNames(conn []string) []string {
	for _, v := range conn {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = strings.Trim(tok, " \t")
			if tok != "" && !strings.EqualFold(tok, "keep-alive") {
				return conn
			}
		}
	}
	return nil
}
