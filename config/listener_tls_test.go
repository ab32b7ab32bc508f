package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func TestListenerTLSGetsItsDefaults(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir, "a")
	ca := testutil.NewCA(t, "clients").WriteCert(t, dir, "ca")
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8443
    tls:
      certificates: [{cert_file: `+cert+`, key_file: `+key+`}]
      client_ca_file: `+ca+`
      client_cert_header: x-client-subject
      hsts: {}
    routes: [{upstream: u}]
  - name: plain
    listen: :8080
    routes: [{upstream: u}]
  - name: redirect
    listen: :8081
    redirect_https: true
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	tl := cfg.Listeners[0].TLS
	if tl.MinVersion != "1.2" || !slices.Equal(tl.ALPN, []string{"h2", "http/1.1"}) || tl.ClientAuth != "require" {
		t.Errorf("tls defaults: min_version %q, alpn %q, client_auth %q; want 1.2, [h2 http/1.1], require", tl.MinVersion, tl.ALPN, tl.ClientAuth)
	}
	if tl.ClientCertHeader != "X-Client-Subject" {
		t.Errorf("client_cert_header %q, want it canonical: X-Client-Subject", tl.ClientCertHeader)
	}
	if h := tl.HSTS; h.MaxAge == nil || *h.MaxAge != Duration(365*24*time.Hour) {
		t.Errorf("hsts.max_age = %v, want 365 days by default", h.MaxAge)
	}
	if got := tl.Certs(); len(got) != 1 || got[0].CertFile != cert {
		t.Errorf("Certs() = %+v", got)
	}
	if tl.ClientAuthType() != tls.RequireAndVerifyClientCert {
		t.Errorf("client auth %v, want RequireAndVerifyClientCert", tl.ClientAuthType())
	}
	if cfg.Listeners[0].H2C != nil {
		t.Errorf("a TLS listener got h2c %v", *cfg.Listeners[0].H2C)
	}
	if h2c := cfg.Listeners[1].H2C; h2c == nil || !*h2c {
		t.Errorf("a cleartext listener's h2c is %v, want on by default", h2c)
	}
}

func TestCipherSuiteIDsFollowTheNames(t *testing.T) {
	tl := &TLS{ListenerTLS: ListenerTLS{CipherSuites: []string{"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}}
	want := []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	if got := tl.CipherSuiteIDs(); !slices.Equal(got, want) {
		t.Errorf("CipherSuiteIDs = %x, want %x", got, want)
	}
}

// TestListenerTLSProblemsArePlaced: every listener TLS, h2c and
// redirect_https mistake is reported at its value or key.
func TestListenerTLSProblemsArePlaced(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := writeKeyPair(t, dir, "a")
	_, keyB := writeKeyPair(t, dir, "b")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("CERT_A", certA, "KEY_A", keyA, "KEY_B", keyB, "GARBAGE", garbage, "DIR", dir)
	src := r.Replace(`listeners:
  - name: a
    listen: :8443
    tls:
      certificates:
        - {cert_file: CERT_A, key_file: KEY_A}
        - {cert_file: CERT_A, key_file: KEY_B}
        - {cert_file: DIR/nope.crt, key_file: KEY_A}
        - {cert_file: GARBAGE, key_file: KEY_A}
        - {cert_file: CERT_A}
      min_version: "1.1"
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_RC4_128_SHA, TLS_AES_128_GCM_SHA256, TLS_NOPE]
      alpn: [h2, h3, h2]
      client_auth: sometimes
      client_cert_header: "X Bad"
      hsts: {max_age: 1h, preload: true}
    routes: [{upstream: u}]
  - name: b
    listen: :8444
    h2c: true
    tls:
      cert_file: CERT_A
      key_file: KEY_A
      certificates: [{cert_file: CERT_A, key_file: KEY_A}]
      min_version: "1.3"
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
      client_ca_file: GARBAGE
    redirect_https: true
    routes: [{upstream: u}]
  - name: c
    listen: :8445
    tls:
      certificates: []
      client_auth: require
      client_cert_header: X-Client
    routes: [{upstream: u}]
  - name: d
    listen: :8080
    redirect_https: true
    redirect_https_port: 70000
    routes: [{upstream: u}]
  - name: e
    listen: :8081
    redirect_https_port: 8443
    routes: [{upstream: u}]
  - name: f
    protocol: tcp
    listen: :8082
    upstream: u
    h2c: false
    redirect_https: true
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	var known []string
	for _, cs := range tls.CipherSuites() {
		if !slices.Contains(cs.SupportedVersions, tls.VersionTLS13) {
			known = append(known, cs.Name)
		}
	}
	suites := "(known: " + strings.Join(known, ", ") + ")"
	want := r.Replace(strings.Join([]string{
		`lb.yaml:7:23: tls.certificates[1].cert_file "CERT_A" and tls.certificates[1].key_file "KEY_B" are not a usable key pair: tls: private key does not match public key`,
		`lb.yaml:8:23: tls.certificates[2].cert_file "DIR/nope.crt": no such file or directory`,
		`lb.yaml:9:23: tls.certificates[3].cert_file "GARBAGE" and tls.certificates[3].key_file "KEY_A" are not a usable key pair: tls: failed to find any PEM data in certificate input`,
		`lb.yaml:10:11: tls.certificates[4].key_file is required`,
		`lb.yaml:11:20: tls.min_version 1.1 is deprecated (RFC 8996) and not accepted; the lowest is 1.2`,
		`lb.yaml:12:62: tls.cipher_suites: TLS_RSA_WITH_RC4_128_SHA is insecure and not accepted ` + suites,
		`lb.yaml:12:88: tls.cipher_suites: TLS_AES_128_GCM_SHA256 is a TLS 1.3 suite, which Go always enables and does not let you choose ` + suites,
		`lb.yaml:12:112: unknown tls.cipher_suites name "TLS_NOPE" ` + suites,
		`lb.yaml:13:18: unknown tls.alpn protocol "h3" (known: h2, http/1.1)`,
		`lb.yaml:13:22: tls.alpn lists "h2" twice`,
		`lb.yaml:14:20: unknown tls.client_auth "sometimes" (known: require, verify_if_given)`,
		`lb.yaml:15:27: tls.client_cert_header "X Bad" is not a valid header name`,
		`lb.yaml:16:27: hsts.preload needs include_subdomains: true and a max_age of at least 8760h (365 days), as the preload list requires`,
		`lb.yaml:20:5: h2c is for listeners without tls; a TLS listener offers HTTP/2 by ALPN (tls.alpn)`,
		`lb.yaml:22:7: tls: cert_file and key_file are the one-certificate form of certificates; use one of them`,
		`lb.yaml:26:7: tls.cipher_suites are TLS 1.2 suites; with min_version 1.3 they are never used (TLS 1.3's suites are not configurable)`,
		`lb.yaml:27:23: tls.client_ca_file "GARBAGE" holds no PEM certificate`,
		`lb.yaml:28:5: redirect_https is for listeners without tls: it sends their clients to a TLS listener`,
		`lb.yaml:33:21: tls.certificates is empty: list at least one {cert_file, key_file}`,
		`lb.yaml:34:20: tls.client_auth needs tls.client_ca_file, the CAs that client certificates are verified against`,
		`lb.yaml:35:27: tls.client_cert_header needs tls.client_ca_file: without it no client certificate is asked for`,
		`lb.yaml:40:26: redirect_https_port 70000 is outside 1-65535`,
		`lb.yaml:41:5: routes are never used: redirect_https answers every request of this listener`,
		`lb.yaml:44:5: redirect_https_port needs redirect_https: true`,
		`lb.yaml:50:5: h2c is for http listeners; a tcp listener forwards connections to its upstream`,
		`lb.yaml:51:5: redirect_https is for http listeners; a tcp listener forwards connections to its upstream`,
	}, "\n"))
	checkLines(t, problemLines(t, "lb.yaml", src), strings.Split(want, "\n"))
}

// docsTLSFiles gives the TLS examples of docs/ the files they name under
// /etc/switchboard/tls/: NAME.crt and NAME.key are one real key pair,
// NAME.pem a real CA certificate.
func docsTLSFiles(t *testing.T, path string) ([]byte, bool) {
	const dir = "/etc/switchboard/tls/"
	if !strings.HasPrefix(path, dir) {
		return nil, false
	}
	docsPKIOnce.Do(func() {
		tmp := t.TempDir()
		docsPKI.cert, docsPKI.key = writeKeyPair(t, tmp, "doc")
		docsPKI.ca = testutil.NewCA(t, "doc CA").WriteCert(t, tmp, "ca")
		for _, p := range []*string{&docsPKI.cert, &docsPKI.key, &docsPKI.ca} {
			b, err := os.ReadFile(*p)
			if err != nil {
				t.Fatal(err)
			}
			*p = string(b)
		}
	})
	switch filepath.Ext(path) {
	case ".crt":
		return []byte(docsPKI.cert), true
	case ".key":
		return []byte(docsPKI.key), true
	case ".pem":
		return []byte(docsPKI.ca), true
	}
	return nil, false
}

var (
	docsPKIOnce sync.Once
	docsPKI     struct{ cert, key, ca string }
)
