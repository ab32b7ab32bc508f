package admin

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// explain serves GET /api/v1/explain: how a listener would handle the
// request the query describes (docs/explain.md). Parameters: listener
// (default: the first http listener), method (GET), host, path ("/",
// query allowed), header=Name:Value (repeatable) and client_ip. A bad
// parameter, or a listener that is not a running http listener, is 400.
func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	if s.src.Explain == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "explain is not available", "code": "not_implemented"})
		return
	}
	req, err := explainRequest(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "code": "bad_request"})
		return
	}
	v, err := s.src.Explain(r.URL.Query().Get("listener"), req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "code": "bad_request"})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// badParam is a query parameter explain cannot use.
type badParam struct{ name, msg string }

func (e *badParam) Error() string { return "parameter " + e.name + ": " + e.msg }

// explainRequest builds the request that q describes, as the proxy would
// have received it.
func explainRequest(q url.Values) (*http.Request, error) {
	for name := range q {
		switch name {
		case "listener", "method", "host", "path", "header", "client_ip":
		default:
			return nil, &badParam{name, "unknown (known: listener, method, host, path, header, client_ip)"}
		}
	}
	method := q.Get("method")
	if method == "" {
		method = http.MethodGet
	}
	if !httpguts.ValidHeaderFieldName(method) { // a method is a token too
		return nil, &badParam{"method", strconv.Quote(method) + " is not a valid method"}
	}
	path := q.Get("path")
	if path == "" {
		path = "/"
	}
	if path[0] != '/' {
		return nil, &badParam{"path", strconv.Quote(path) + " must start with /"}
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, &badParam{"path", strconv.Quote(path) + " is not a request path: " + err.Error()}
	}
	host := q.Get("host")
	if !httpguts.ValidHostHeader(host) {
		return nil, &badParam{"host", strconv.Quote(host) + " is not a valid Host"}
	}
	r := &http.Request{Method: method, Host: host, RequestURI: path, URL: u,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody}
	for i, h := range q["header"] {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, &badParam{"header", "#" + strconv.Itoa(i+1) + " " + strconv.Quote(h) + " is not Name:Value"}
		}
		r.Header.Add(name, value)
	}
	if ip := q.Get("client_ip"); ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, &badParam{"client_ip", strconv.Quote(ip) + " is not an IP address"}
		}
		r.RemoteAddr = net.JoinHostPort(a.String(), "0")
	}
	return r, nil
}
