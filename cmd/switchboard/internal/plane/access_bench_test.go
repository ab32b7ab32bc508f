package plane_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
)

// accessBenchYAML is a listener with a plain route and one route per
// access-control feature, all to the endpoint at target. The IP lists
// hold 1000 prefixes, and the listener trusts loopback's X-Forwarded-For.
func accessBenchYAML(t testing.TB, target string) string {
	var allow strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&allow, "10.%d.%d.0/24, ", i/256, i%256)
	}
	allow.WriteString("203.0.113.0/24")
	return `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    trusted_proxies: [127.0.0.0/8]
    routes:
      - {name: plain, match: {path_prefix: /plain}, upstream: app}
      - name: ip
        match: {path_prefix: /ip}
        upstream: app
        access: {allow: [` + allow.String() + `], deny: [203.0.113.7]}
      - name: basic
        match: {path_prefix: /basic}
        upstream: app
        basic_auth: {users: {alice: "` + hashOf(t, "alice-pw") + `"}}
      - name: cors
        match: {path_prefix: /cors}
        upstream: app
        cors: {allow_origins: [https://app.example.com], expose_headers: [X-Total]}
upstreams:
  app:
    targets: [{address: ` + target + `}]
`
}

// accessRequests are the keep-alive GETs of the access benchmarks, each
// allowed by its route.
var accessRequests = map[string]string{
	"plain":     "GET /plain HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n",
	"plain-xff": "GET /plain HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nX-Forwarded-For: 203.0.113.5\r\n\r\n",
	"ip":        "GET /ip HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nX-Forwarded-For: 203.0.113.5\r\n\r\n",
	"basic":     "GET /basic HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nAuthorization: Basic YWxpY2U6YWxpY2UtcHc=\r\n\r\n",
	"cors":      "GET /cors HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nOrigin: https://app.example.com\r\n\r\n",
}

// BenchmarkAccessControl measures one keep-alive GET through routes with
// access control against the plain route in the same run: an IP allow
// list of 1000 prefixes behind a trusted proxy, basic auth with the
// credentials cached (bcrypt runs once), and CORS on a request with an
// allowed Origin.
func BenchmarkAccessControl(b *testing.B) {
	be := rawBackend(b)
	p := startProxy(b, accessBenchYAML(b, be))
	for _, name := range []string{"plain", "plain-xff", "ip", "basic", "cors"} {
		b.Run(name, func(b *testing.B) {
			benchGetsOf(b, []byte(accessRequests[name]), func() (net.Conn, error) { return net.Dial("tcp", p.srv.Addr("web")) })
		})
	}
}

// TestAccessControlAllocations: an IP allow list, basic auth with cached
// credentials, and CORS's headers on an allowed request add no
// allocation to a proxied GET (the plain route's count, measured in the
// same run, is the reference).
func TestAccessControlAllocations(t *testing.T) {
	be := rawBackend(t)
	p := startProxy(t, onGoroutineEngine(accessBenchYAML(t, be)))
	c, err := net.Dial("tcp", p.srv.Addr("web"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	allocs := map[string]float64{}
	for _, name := range []string{"plain", "plain-xff", "ip", "basic", "cors"} {
		req := []byte(accessRequests[name])
		get := func() {
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			if st, err := readResponse(br); err != nil || st != 200 {
				t.Fatalf("%s: status %d, %v", name, st, err)
			}
		}
		for range 100 {
			get()
		}
		allocs[name] = testing.AllocsPerRun(1000, get)
	}
	t.Logf("allocations per request: %v", allocs)
	for name, ref := range map[string]string{"ip": "plain-xff", "basic": "plain", "cors": "plain"} {
		if allocs[name] > allocs[ref] {
			t.Errorf("route %s allocates %.2f times a request, the plain route %.2f (%s)", name, allocs[name], allocs[ref], ref)
		}
	}
}
