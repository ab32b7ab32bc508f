package httpproxy

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/ratelimit"
)

// The error codes of requests a route's access control refuses.
const (
	// CodeForbidden: the client's address is denied, or not allowed, by
	// the route's access lists (403).
	CodeForbidden = "forbidden"
	// CodeCORSForbidden: a CORS preflight the route's policy refuses: an
	// origin, method or header it does not allow (403).
	CodeCORSForbidden = "cors_forbidden"
	// CodeUnauthorized: basic_auth credentials missing or wrong (401, with
	// WWW-Authenticate).
	CodeUnauthorized = "unauthorized"
	// CodeAuthBusy: every slot for checking a password was taken for too
	// long, as in a flood of wrong passwords (503, Retry-After: 1).
	CodeAuthBusy = "auth_busy"
	// CodeAuthUnavailable: the forward_auth service could not be reached,
	// did not answer within its timeout, or broke off (503).
	CodeAuthUnavailable = "auth_unavailable"
	// CodeAuthFailed: the forward_auth service's refusal was too large to
	// relay (over max_response_bytes) (502).
	CodeAuthFailed = "auth_failed"
)

// accessControl is a route's access checks, built once with its table.
// They run before the request body is read and before the pipeline (and
// so before rate limits), in this order: the IP lists, a CORS preflight
// (answered here), basic auth, forward auth.
type accessControl struct {
	allow, deny *ipSet // nil: not set
	cors        *corsPolicy
	basic       *basicAuth
	forward     *forwardAuth
}

// newAccessControl builds route rc's access control, or returns nil when
// it has none. rc must have passed validation.
func newAccessControl(rc *config.Route) *accessControl {
	if rc.Access == nil && rc.CORS == nil && rc.BasicAuth == nil && rc.ForwardAuth == nil {
		return nil
	}
	a := &accessControl{}
	if ac := rc.Access; ac != nil {
		if len(ac.Allow) > 0 {
			a.allow = newIPSet(mustPrefixes(ac.Allow))
		}
		if len(ac.Deny) > 0 {
			a.deny = newIPSet(mustPrefixes(ac.Deny))
		}
	}
	if rc.CORS != nil {
		a.cors = newCORSPolicy(rc.CORS)
	}
	if rc.BasicAuth != nil {
		a.basic = newBasicAuth(rc.BasicAuth)
	}
	if rc.ForwardAuth != nil {
		a.forward = newForwardAuth(rc.ForwardAuth)
	}
	return a
}

// mustPrefixes parses validated addresses and prefixes.
func mustPrefixes(list []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := ratelimit.ParsePrefix(s)
		if err != nil {
			panic("httpproxy: an unvalidated prefix: " + err.Error())
		}
		out = append(out, p)
	}
	return out
}

// trustedProxies parses a listener's validated trusted_proxies.
func trustedProxies(list []string) []netip.Prefix {
	if len(list) == 0 {
		return nil
	}
	return mustPrefixes(list)
}

// checkAccess runs route rt's access checks on r. It reports true when it
// answered the request itself (a refusal, or a CORS preflight); then res
// is what it answered. A request let through goes on with its header
// changed as the checks say: the CORS headers set on the response, the
// forward-auth service's chosen headers and basic auth's user set on the
// request, and the Authorization header removed after basic auth unless
// keep_authorization is set.
func (h *Handler) checkAccess(w http.ResponseWriter, r *http.Request, t *Table, rt *route, start time.Time) (res result, done bool) {
	a := rt.access
	if a.allow != nil || a.deny != nil {
		addr, ok := ratelimit.ClientAddr(r.RemoteAddr, r.Header["X-Forwarded-For"], t.trusted)
		if !ok || a.deny != nil && a.deny.contains(addr) || a.allow != nil && !a.allow.contains(addr) {
			rt.metrics.Denied(httpmetrics.DeniedIP)
			WriteError(w, http.StatusForbidden, CodeForbidden, "client address "+addrString(addr, ok)+" may not use this route")
			return result{status: http.StatusForbidden}, true
		}
	}
	if a.cors != nil {
		if isPreflight(r) {
			status := a.cors.preflight(w, r)
			if status != http.StatusNoContent {
				rt.metrics.Denied(httpmetrics.DeniedCORS)
			}
			return result{status: status}, true
		}
		// Set now so that a refusal below, or a proxy error, carries
		// them too; respond sets them again over the upstream's.
		a.cors.decorate(w.Header(), r)
	}
	if b := a.basic; b != nil {
		if status := h.checkBasicAuth(w, r, rt, b, start); status != 0 {
			rt.metrics.Denied(httpmetrics.DeniedBasicAuth)
			return result{status: status}, true
		}
	}
	if f := a.forward; f != nil {
		if status := h.checkForwardAuth(w, r, t, rt, f); status != 0 {
			rt.metrics.Denied(httpmetrics.DeniedForwardAuth)
			return result{status: status}, true
		}
	}
	if b := a.basic; b != nil && !b.keep {
		delete(r.Header, "Authorization")
	}
	return result{}, false
}

// dropVouched removes from h the client's own values of names, the
// canonical names of headers the proxy vouches for (forward auth's
// copy_response_headers, basic auth's user_header), and of every header
// whose name reads as one of them with underscores for dashes: CGI-style
// upstreams (PHP, WSGI, Rack) see X_User and X-User both as HTTP_X_USER,
// and would take the client's value for the one the proxy set.
func dropVouched(h http.Header, names []string) {
	if len(names) == 0 {
		return
	}
	for _, k := range names {
		delete(h, k)
	}
	dropAliases(h, names)
}

// dropAliases removes from h the fields whose names are those of names,
// canonical and with dashes, written with underscores (X_User for
// X-User); the fields of names themselves stay.
func dropAliases(h http.Header, names []string) {
	for k := range h {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		for _, name := range names {
			if sameDashed(k, name) {
				delete(h, k)
				break
			}
		}
	}
}

// sameDashed reports whether header names a and b are equal ignoring
// case, with '_' and '-' taken as the same.
func sameDashed(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y && lower(x) != lower(y) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// peerTrusted reports whether r's peer is one of the listener's trusted
// proxies.
func (t *Table) peerTrusted(r *http.Request) bool {
	if len(t.trusted) == 0 {
		return false
	}
	a, ok := ratelimit.ClientAddr(r.RemoteAddr, nil, nil)
	if !ok {
		return false
	}
	for _, p := range t.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func addrString(a netip.Addr, ok bool) string {
	if !ok {
		return "(unknown)"
	}
	return a.String()
}
