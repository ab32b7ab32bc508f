package client_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// An upstream with a tls block speaks TLS from a Go program as from the
// proxy: HTTP/2 or HTTP/1.1 by ALPN (http1 forces HTTP/1.1), verified
// against ca_file, with the client certificate; a certificate that does
// not verify is a connect failure, tried again on another endpoint.
func TestAYAMLUpstreamSpeaksTLS(t *testing.T) {
	ca, other := testutil.NewTestCA(t), testutil.NewTestCA(t)
	start := func(ca *testutil.TestCA, name string) string {
		cert, _, _ := ca.Issue(t, name, "127.0.0.1")
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cn := ""
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				cn = r.TLS.PeerCertificates[0].Subject.CommonName
			}
			fmt.Fprintf(w, "%s %s %s", name, r.Proto, cn)
		}))
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "https://")
	}
	good, untrusted := start(ca, "good"), start(other, "untrusted")
	_, certFile, keyFile := ca.Issue(t, "caller")
	tlsBlock := fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", ca.CAFile, certFile, keyFile)
	cfg, err := client.ParseConfig([]byte(`
upstreams:
  auto:
    tls: `+tlsBlock+`
    health: {passive: {enabled: false}}
    targets: [{address: "`+untrusted+`"}, {address: "`+good+`"}]
  h1:
    protocol: http1
    tls: `+tlsBlock+`
    targets: [{address: "`+good+`"}]
`), "client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, client.WithConfig(cfg))
	for range 4 { // round robin: half the calls meet untrusted first
		if st, body := get(t, c.HTTPClient(), "http://auto/"); st != 200 || body != "good HTTP/2.0 caller" {
			t.Fatalf("auto: %d %q; want good over HTTP/2 with the client certificate", st, body)
		}
	}
	if st, body := get(t, c.HTTPClient(), "http://h1/"); st != 200 || body != "good HTTP/1.1 caller" {
		t.Fatalf("h1: %d %q; want HTTP/1.1", st, body)
	}
}
