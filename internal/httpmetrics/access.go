package httpmetrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The reasons a route's access control refuses a request, the values of
// the reason label of switchboard_http_access_denied_total.
const (
	DeniedIP          = "ip"           // access: allow/deny lists (403)
	DeniedCORS        = "cors"         // cors: a preflight the policy refuses (403)
	DeniedBasicAuth   = "basic_auth"   // basic_auth: no or wrong credentials (401), or no bcrypt slot (503)
	DeniedForwardAuth = "forward_auth" // forward_auth: the auth service said no, or did not answer
)

// deniedReasons are the reasons, in the order of routeAccess.denied.
var deniedReasons = [...]string{DeniedIP, DeniedCORS, DeniedBasicAuth, DeniedForwardAuth}

// accessVecs are the access-control metric vectors.
type accessVecs struct {
	denied *prometheus.CounterVec
	bcrypt *prometheus.CounterVec
}

func newAccessVecs() accessVecs {
	return accessVecs{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_access_denied_total",
			Help: "Requests a route's access control refused, by listener, route, upstream and reason (ip, cors, basic_auth, forward_auth).",
		}, []string{"listener", "route", "upstream", "reason"}),
		bcrypt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_basic_auth_bcrypt_checks_total",
			Help: "Passwords checked against a bcrypt hash (basic_auth credentials not found in the cache of recent successes), by listener, route and upstream.",
		}, []string{"listener", "route", "upstream"}),
	}
}

// routeAccess caches a route's access-control series.
type routeAccess struct {
	denied [len(deniedReasons)]atomic.Pointer[counterBox]
	bcrypt atomic.Pointer[counterBox]
}

// Denied counts a request the route's access control refused for reason,
// one of the Denied* constants; any other reason is not counted, which
// keeps the label's values bounded.
func (r *Route) Denied(reason string) {
	if r == nil {
		return
	}
	for i, name := range deniedReasons {
		if name != reason {
			continue
		}
		b := r.access.denied[i].Load()
		if b == nil {
			b = &counterBox{r.m.access.denied.WithLabelValues(r.listener, r.route, r.upstream, name)}
			r.access.denied[i].Store(b)
		}
		b.c.Inc()
		return
	}
}

// BcryptCheck counts a password checked against a bcrypt hash.
func (r *Route) BcryptCheck() {
	if r == nil {
		return
	}
	b := r.access.bcrypt.Load()
	if b == nil {
		b = &counterBox{r.m.access.bcrypt.WithLabelValues(r.listener, r.route, r.upstream)}
		r.access.bcrypt.Store(b)
	}
	b.c.Inc()
}
