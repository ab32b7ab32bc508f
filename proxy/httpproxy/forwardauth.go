package httpproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/config"
)

// forwardAuth is a route's forward_auth: the auth service's URL, and a
// client that never follows a redirect (a redirect to a login page is an
// answer for the client).
type forwardAuth struct {
	url         string
	client      *http.Client
	timeout     time.Duration
	reqHeaders  []string // canonical; nil: all of the client's
	respHeaders []string // canonical
	maxBody     int64
}

// forwardAuthTransport is the connection pool of every route's forward
// auth, process wide, so that a reload (or an auto-route rebuild) keeps
// the connections to the auth services: per service host, at most 256
// connections, 64 of them kept idle for 30s. Each exchange's context
// bounds it, dialing included, by the route's timeout.
var forwardAuthTransport = &http.Transport{
	DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 64,
	MaxConnsPerHost:     256,
	IdleConnTimeout:     30 * time.Second,
	ForceAttemptHTTP2:   true,
	DisableCompression:  true,
}

func newForwardAuth(c *config.ForwardAuth) *forwardAuth {
	return &forwardAuth{
		url: c.URL,
		client: &http.Client{
			Transport:     forwardAuthTransport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout:     c.Timeout.Std(),
		reqHeaders:  c.CopyRequestHeaders,
		respHeaders: c.CopyResponseHeaders,
		maxBody:     int64(c.MaxResponseBytes),
	}
}

// forwardAuthSkip are the request headers never sent to the auth
// service: hop-by-hop ones, those of a body (the subrequest has none),
// and the X-Forwarded-* the proxy sets itself.
var forwardAuthSkip = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Content-Type": true, "Content-Encoding": true, "Expect": true, "Host": true,
	"X-Forwarded-For": true, "X-Forwarded-Proto": true, "X-Forwarded-Host": true,
	"X-Forwarded-Method": true, "X-Forwarded-Uri": true, "X-Request-Id": true,
}

// checkForwardAuth asks route rt's auth service f about r. It returns 0
// when the service answered 2xx (and sets the answer's chosen headers on
// r), or the status it answered the client with: the service's own
// answer, 503 auth_unavailable, or 502 auth_failed.
func (h *Handler) checkForwardAuth(w http.ResponseWriter, r *http.Request, t *Table, rt *route, f *forwardAuth) int {
	// A client's own values of the headers the service vouches for never
	// reach the upstream.
	dropVouched(r.Header, f.respHeaders)
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		WriteError(w, http.StatusServiceUnavailable, CodeAuthUnavailable, "auth service: "+err.Error())
		return http.StatusServiceUnavailable
	}
	f.header(req.Header, r, t)
	resp, err := f.client.Do(req)
	if err != nil {
		msg := "auth service did not answer: " + err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = "auth service did not answer within " + f.timeout.String()
		}
		h.log.Debug("forward auth failed", "listener", h.name, "route", rt.name, "error", err)
		WriteError(w, http.StatusServiceUnavailable, CodeAuthUnavailable, msg)
		return http.StatusServiceUnavailable
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		for _, k := range f.respHeaders {
			if v := resp.Header[k]; len(v) > 0 {
				r.Header[k] = v
			}
		}
		// Read a little of what is left so that the connection can be
		// used again.
		io.CopyN(io.Discard, resp.Body, 4096)
		return 0
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBody+1))
	switch {
	case err != nil:
		WriteError(w, http.StatusServiceUnavailable, CodeAuthUnavailable, "auth service's answer broke off: "+err.Error())
		return http.StatusServiceUnavailable
	case int64(len(body)) > f.maxBody:
		WriteError(w, http.StatusBadGateway, CodeAuthFailed, "auth service's answer is larger than forward_auth.max_response_bytes ("+strconv.FormatInt(f.maxBody, 10)+")")
		return http.StatusBadGateway
	}
	dst := w.Header()
	copyResponseHeader(dst, resp.Header)
	delete(dst, "Content-Length")
	if _, ok := dst["Content-Type"]; !ok {
		dst["Content-Type"] = nil
	}
	dst["Content-Length"] = []string{strconv.Itoa(len(body))}
	status := resp.StatusCode
	if status < 200 {
		status = http.StatusBadGateway // a 1xx final answer is not one
	}
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// header fills the auth request's header from r: the chosen (or all)
// end-to-end headers of the client, X-Request-Id, and X-Forwarded-Method,
// -Proto, -Host, -Uri and -For. When the client's peer is a trusted proxy, the
// X-Forwarded-For, -Proto and -Host it sent are kept (the peer is added
// to X-Forwarded-For); otherwise they describe this hop alone.
func (f *forwardAuth) header(dst http.Header, r *http.Request, t *Table) {
	if f.reqHeaders == nil {
		for k, vv := range r.Header {
			if !forwardAuthSkip[k] {
				dst[k] = vv
			}
		}
	} else {
		for _, k := range f.reqHeaders {
			if v := r.Header[k]; len(v) > 0 && !forwardAuthSkip[k] {
				dst[k] = v
			}
		}
	}
	peer, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		peer = r.RemoteAddr
	}
	trusted := t.peerTrusted(r)
	proto, host, xff := "http", r.Host, peer
	if r.TLS != nil {
		proto = "https"
	}
	if trusted {
		if v := r.Header["X-Forwarded-Proto"]; len(v) == 1 {
			proto = v[0]
		}
		if v := r.Header["X-Forwarded-Host"]; len(v) == 1 {
			host = v[0]
		}
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			xff = strings.Join(prior, ", ") + ", " + peer
		}
	}
	dst["X-Request-Id"] = r.Header["X-Request-Id"]
	dst["X-Forwarded-Method"] = []string{r.Method}
	dst["X-Forwarded-Proto"] = []string{proto}
	dst["X-Forwarded-Host"] = []string{host}
	dst["X-Forwarded-Uri"] = []string{r.URL.RequestURI()}
	dst["X-Forwarded-For"] = []string{xff}
}
