//go:build unix

package plane_test

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// rewriteBenchRoutes are two routes to one upstream: a plain one, and one
// with what an operator typically writes: strip_prefix, a request header
// set from a placeholder and a literal, one removed, and response headers
// set and removed.
const rewriteBenchRoutes = `
      - match: {path_prefix: /strip/}
        upstream: app
        rewrite: {strip_prefix: /strip}
      - match: {path_prefix: /api/}
        upstream: app
        rewrite: {strip_prefix: /api}
        request_headers: {set: {X-Client: "{client_ip}", X-Env: prod}, remove: [X-Debug]}
        response_headers: {set: {X-Frame-Options: DENY}, remove: [Server]}
      - match: {path_prefix: /}
        upstream: app`

// TestRewrittenRequestAllocations bounds what rewrites add to a proxied
// GET's allocations (TestProxiedRequestAllocations): header rules with
// literal values, or with up to two values that are one placeholder each,
// nothing; strip_prefix one, the rewritten request.
func TestRewrittenRequestAllocations(t *testing.T) {
	be := rawBackend(t)
	p := startProxy(t, onGoroutineEngine(rewriteYAML(`
      - match: {path_prefix: /literal/}
        upstream: app
        request_headers: {set: {X-Env: prod}, remove: [X-Debug]}
        response_headers: {set: {X-Frame-Options: DENY}}
      - match: {path_prefix: /placeholders/}
        upstream: app
        request_headers: {set: {X-Client: "{client_ip}", X-Env: prod}}
        response_headers: {set: {X-Served-By: "{endpoint}"}}`+rewriteBenchRoutes, be)))
	addr := p.srv.Addr("web")
	plain, literal, placeholders, rewrite := allocsPerGet(t, addr, "/bench"), allocsPerGet(t, addr, "/literal/x"),
		allocsPerGet(t, addr, "/placeholders/x"), allocsPerGet(t, addr, "/api/bench")
	t.Logf("allocations per request: plain route %.2f, literal header rules %.2f, placeholder values %.2f, strip_prefix and headers %.2f", plain, literal, placeholders, rewrite)
	if literal > plain {
		t.Errorf("literal header rules allocate %.2f times a request, the plain route %.2f: want no more", literal, plain)
	}
	if placeholders > plain {
		t.Errorf("header rules with two placeholder values allocate %.2f times a request, the plain route %.2f: want no more", placeholders, plain)
	}
	if rewrite > plain+1 {
		t.Errorf("strip_prefix with header rules allocates %.2f times a request, the plain route %.2f: want at most one more", rewrite, plain)
	}
}

// BenchmarkProxyHTTP1Rewrite compares, in one run, a keep-alive GET
// through the plain route (plain) with one through a route that only
// strips a prefix (strip) and one through the rewriting route (rewrite),
// to the same endpoint: the cost of rewrites is the ratio.
// Besides ns/op it reports cpu-ns/op, the process's CPU time per request
// (proxy, client and endpoint together, the latter two the same in both),
// which a machine loaded by others disturbs less than wall time.
func BenchmarkProxyHTTP1Rewrite(b *testing.B) {
	be := rawBackend(b)
	p := startProxy(b, rewriteYAML(rewriteBenchRoutes, be))
	dial := func() (net.Conn, error) { return net.Dial("tcp", p.srv.Addr("web")) }
	b.Run("plain", func(b *testing.B) { withCPUPerOp(b, func() { benchGetsOf(b, getRequest("/bench/items"), dial) }) })
	b.Run("strip", func(b *testing.B) { withCPUPerOp(b, func() { benchGetsOf(b, getRequest("/strip/bench/items"), dial) }) })
	b.Run("rewrite", func(b *testing.B) { withCPUPerOp(b, func() { benchGetsOf(b, getRequest("/api/bench/items"), dial) }) })
}

// withCPUPerOp runs fn and reports the process's CPU time per b.N.
func withCPUPerOp(b *testing.B, fn func()) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	fn()
	b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
}
