package httpproxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/retry"
)

// route is the running form of a configured route.
type route struct {
	name     string
	host     string // lower-case; "" matches any
	wildcard bool   // host was "*.example.com": host holds ".example.com"
	prefix   string
	methods  []string
	headers  [][2]string // canonical name, exact value
	up       *Upstream
	timeout  time.Duration
	metrics  *routeMetrics

	limiters           []*limiter // rate limits, in order
	bulkhead           *bulkhead  // nil: no concurrency limit
	bulkheadRejected   prometheus.Counter
	upBulkheadRejected prometheus.Counter

	brk      *breaker.Breaker // route breaker; nil for none
	fb       *fallback.Chain  // fallback chain; nil for none
	staleMax int64            // largest response body kept for stale

	retry  *retry.Policy // nil: only the connect-failure retry
	budget *retry.Budget
	p95    *p95Tracker // recent latency, for hedge_after: p95; nil otherwise
}

// table is one listener's routes, swapped whole on reload.
type table struct {
	listener  string
	routes    []*route
	accessLog bool
	maxBody   int64
	idle      time.Duration // bounds an idle protocol-switch tunnel
	noRoute   *routeMetrics
	// active counts requests being served on this table, so that the
	// metrics sweep keeps the series a replaced table's requests still
	// count on (sweep.go).
	active atomic.Int64
}

func (t *table) match(r *http.Request) *route {
	var host string
	for _, rt := range t.routes {
		if rt.host != "" {
			if host == "" {
				host = requestHost(r)
			}
			if rt.wildcard {
				if !strings.HasSuffix(host, rt.host) || len(host) == len(rt.host) {
					continue
				}
			} else if host != rt.host {
				continue
			}
		}
		if !strings.HasPrefix(r.URL.Path, rt.prefix) {
			continue
		}
		if rt.methods != nil && !contains(rt.methods, r.Method) {
			continue
		}
		ok := true
		for _, h := range rt.headers {
			if v := r.Header[h[0]]; len(v) == 0 || v[0] != h[1] {
				ok = false
				break
			}
		}
		if ok {
			return rt
		}
	}
	return nil
}

// requestHost is the request's host without port, lower-cased.
func requestHost(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
