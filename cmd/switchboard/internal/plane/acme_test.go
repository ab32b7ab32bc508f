package plane_test

// tls.acme listeners against a real ACME server: pebble, started by each
// test on loopback ports, whose validation authority resolves every name
// to 127.0.0.1 and connects to the test's listeners.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

const acmeHost = "shop.example.com"

// acmeYAML is a TLS listener web on tlsAddr whose certificate comes from
// pebble, routing to backend; acmeExtra is added to its acme block, and
// plainAddr, when set, is a cleartext listener "plain" to the same
// backend.
func acmeYAML(p *testutil.Pebble, tlsAddr, storage, backend, acmeExtra, plainAddr string) string {
	y := fmt.Sprintf(`admin: {enabled: false}
listeners:
  - name: web
    listen: %s
    tls:
      acme:
        hosts: [%s]
        email: ops@example.com
        directory: %s
        ca_file: %s
        storage: %s
%s    routes:
      - upstream: app
`, tlsAddr, acmeHost, p.DirectoryURL, p.CAFile, storage, acmeExtra)
	if plainAddr != "" {
		y += fmt.Sprintf(`  - name: plain
    listen: %s
    routes:
      - upstream: app
`, plainAddr)
	}
	return y + fmt.Sprintf(`upstreams:
  app:
    targets: [{address: %s}]
`, backend)
}

// acmeClient is an HTTPS client that trusts only roots and reaches
// acmeHost at addr, as a browser would after DNS.
func acmeClient(t *testing.T, addr string, roots *x509.CertPool) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getVia GETs https://acmeHost/ and returns the body and the serial of the
// certificate served, or an error (the handshake fails until the
// certificate is there).
func getVia(c *http.Client) (string, *big.Int, error) {
	resp, err := c.Get("https://" + acmeHost + "/")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return string(body), resp.TLS.PeerCertificates[0].SerialNumber, nil
}

// waitServed waits until a request through the TLS listener succeeds,
// and returns the serial of the certificate served.
func waitServed(t *testing.T, c *http.Client, timeout time.Duration, backend string) *big.Int {
	t.Helper()
	var serial *big.Int
	var last error
	testutil.WaitFor(t, timeout, "an HTTPS request through the acme listener to succeed", func() bool {
		var body string
		body, serial, last = getVia(c)
		if last == nil && body != backend {
			t.Fatalf("body %q, want the backend's %q", body, backend)
		}
		return last == nil
	})
	return serial
}

// TestACMEListenerGetsItsCertificateFromTheCAAndKeepsItAcrossRestarts:
// a tls.acme listener obtains its certificate from pebble by tls-alpn-01
// on its own port, a client that trusts only pebble's root completes a
// request through it, the certificate is stored, and a new switchboard
// on the same storage serves it with pebble gone.
func TestACMEListenerGetsItsCertificateFromTheCAAndKeepsItAcrossRestarts(t *testing.T) {
	b := newBackend(t, "a", nil)
	tlsAddr := testutil.FreeAddr(t)
	pb := testutil.StartPebble(t, testutil.PebbleConfig{TLSPort: testutil.PortOf(t, tlsAddr), HTTPPort: testutil.PortOf(t, testutil.DeadAddr(t))})
	storage := filepath.Join(t.TempDir(), "acme") // created by switchboard
	yaml := acmeYAML(pb, tlsAddr, storage, b.addr(), "", "")
	roots := pb.Roots(t)

	p := startProxy(t, yaml)
	serial := waitServed(t, acmeClient(t, tlsAddr, roots), 60*time.Second, "a")

	data, err := os.ReadFile(filepath.Join(storage, acmeHost))
	if err != nil {
		t.Fatalf("certificate not stored: %v", err)
	}
	if leaf := firstCert(t, data); leaf.SerialNumber.Cmp(serial) != 0 {
		t.Errorf("stored certificate %v, served %v", leaf.SerialNumber, serial)
	}
	if n := p.metric("switchboard_acme_certificates_obtained_total", map[string]string{"listener": "web"}); n != 1 {
		t.Errorf("certificates_obtained_total = %v, want 1", n)
	}
	if n := p.metric("switchboard_acme_challenges_total", map[string]string{"listener": "web", "challenge": "tls-alpn-01"}); n < 1 {
		t.Errorf("challenges_total{tls-alpn-01} = %v, want at least 1 (pebble validated on the listener)", n)
	}
	if exp := p.metric("switchboard_acme_certificate_expiry_timestamp_seconds", map[string]string{"listener": "web", "host": acmeHost}); exp == 0 {
		t.Error("no expiry series for the host")
	}

	// Restart without the CA: the stored certificate is served.
	p.srv.Shutdown()
	pb.Stop()
	p2 := startProxy(t, yaml)
	serial2 := waitServed(t, acmeClient(t, tlsAddr, roots), 10*time.Second, "a")
	if serial2.Cmp(serial) != 0 {
		t.Errorf("after restart served certificate %v, want the stored %v", serial2, serial)
	}
	for _, name := range []string{"switchboard_acme_certificates_obtained_total", "switchboard_acme_obtain_failures_total"} {
		if n := p2.metric(name, map[string]string{"listener": "web"}); n != 0 {
			t.Errorf("after restart %s = %v, want 0 (the CA is not asked)", name, n)
		}
	}
}

// TestACMEHTTP01IsAnsweredByTheNamedCleartextListener: with
// http_listener, the CA's http-01 challenge is answered by that
// cleartext listener. pebble's tls-alpn-01 port is dead here, so
// autocert's first choice fails and only http-01 can get the
// certificate. The cleartext listener's routes still serve everything
// else.
func TestACMEHTTP01IsAnsweredByTheNamedCleartextListener(t *testing.T) {
	b := newBackend(t, "a", nil)
	tlsAddr, plainAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	pb := testutil.StartPebble(t, testutil.PebbleConfig{TLSPort: testutil.PortOf(t, testutil.DeadAddr(t)), HTTPPort: testutil.PortOf(t, plainAddr)})
	p := startProxy(t, acmeYAML(pb, tlsAddr, t.TempDir(), b.addr(), "        http_listener: plain\n", plainAddr))

	waitServed(t, acmeClient(t, tlsAddr, pb.Roots(t)), 60*time.Second, "a")
	if n := p.metric("switchboard_acme_challenges_total", map[string]string{"listener": "web", "challenge": "http-01"}); n < 1 {
		t.Errorf("challenges_total{http-01} = %v, want at least 1", n)
	}
	if n := p.metric("switchboard_acme_challenges_total", map[string]string{"listener": "web", "challenge": "tls-alpn-01"}); n != 0 {
		t.Errorf("challenges_total{tls-alpn-01} = %v, want 0 (pebble's tls-alpn-01 port is dead)", n)
	}

	// Other requests on the cleartext listener go to its routes; a
	// challenge path that no challenge is under way for is 404.
	for path, want := range map[string]int{"/": http.StatusOK, "/.well-known/acme-challenge/unknown": http.StatusNotFound} {
		req, _ := http.NewRequest("GET", "http://"+plainAddr+path, nil)
		req.Host = acmeHost
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the cleartext listener: %s %q, want %d", path, resp.Status, body, want)
		}
		if want == http.StatusOK && string(body) != "a" {
			t.Errorf("GET / on the cleartext listener: body %q, want the backend's", body)
		}
	}
}

func firstCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	for len(data) > 0 {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no certificate in %q", data)
	return nil
}
