package plane_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"testing"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// rawTLSBackend is rawBackend over TLS (HTTP/1.1 by ALPN) with a
// certificate of ca, so that a benchmark's extra cost is the proxy's TLS.
func rawTLSBackend(t testing.TB, ca *testutil.TestCA) string {
	t.Helper()
	cert, _, _ := ca.Issue(t, "bench", "127.0.0.1")
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
	return serveRaw(t, func(raw net.Conn) {
		c := tls.Server(raw, cfg)
		br := bufio.NewReader(c)
		for {
			if err := skipHead(br); err != nil {
				return
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
}

// BenchmarkUpstreamTLS measures one keep-alive GET through the proxy to an
// HTTP/1.1 endpoint in cleartext and over TLS (protocol https, HTTP/1.1
// chosen by ALPN, the connection kept alive), in the same run: the
// difference is the cost of encrypting the upstream hop.
func BenchmarkUpstreamTLS(b *testing.B) {
	ca := testutil.NewTestCA(b)
	for _, bc := range []struct {
		name, upstream, addr string
	}{
		{"cleartext", "", rawBackend(b)},
		{"tls", "    protocol: https\n    tls: {ca_file: " + ca.CAFile + "}\n", rawTLSBackend(b, ca)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := startProxy(b, upstreamYAML(bc.upstream, bc.addr))
			benchGets(b, func() (net.Conn, error) { return net.Dial("tcp", p.srv.Addr("web")) })
		})
	}
}
