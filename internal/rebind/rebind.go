// Package rebind keeps web pages out of switchboard's local HTTP APIs (the
// admin API, the embedded registry). A DNS rebinding attack makes a
// visitor's browser send a page's requests to 127.0.0.1 under the
// attacker's own name, which the page then counts as its origin; an API
// that answers only requests addressed to an IP literal, localhost or its
// configured listen host leaves such a page nothing but refusals. And no
// HTTP client library sends the headers browsers add to page-initiated
// requests, so a write that carries them is a page's, not a client's.
package rebind

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// HostAllowed reports whether a request addressed to host (its Host
// header) may be answered by an API listening on listenHost (the host part
// of its listen address; "" for none): host is an IP literal, localhost,
// or listenHost itself. An empty Host (HTTP/1.0) is allowed: browsers
// always send one.
func HostAllowed(host, listenHost string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return IsIPOrLocalhost(host) || (listenHost != "" && strings.EqualFold(host, listenHost))
}

// IsIPOrLocalhost reports whether host (without port) is an IP literal,
// bracketed or not, or "localhost".
func IsIPOrLocalhost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return strings.EqualFold(host, "localhost")
}

// FromBrowser reports whether r carries the headers browsers add to
// cross-origin or page-initiated requests (Fetch Metadata, Origin,
// Referer), which HTTP client libraries do not send.
func FromBrowser(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	return (site != "" && site != "none") || r.Header.Get("Origin") != "" || r.Header.Get("Referer") != ""
}
