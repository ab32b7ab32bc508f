package acme

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	tu "github.com/switchboard-dev/switchboard/internal/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no hosts":   {Storage: t.TempDir()},
		"no storage": {Hosts: []string{"a.example.com"}},
		"wildcard":   {Hosts: []string{"*.example.com"}, Storage: t.TempDir()},
		"no dot":     {Hosts: []string{"localhost"}, Storage: t.TempDir()},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// The handshake path never waits on the CA: before a host's certificate
// is there, and for names that are not the listener's, GetCertificate
// fails at once with an error that says why.
func TestGetCertificateFailsAtOnceUntilReady(t *testing.T) {
	m, err := New(Config{Hosts: []string{"Shop.Example.com"}, Storage: t.TempDir(), Directory: "https://127.0.0.1:1/dir", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for sni, want := range map[string]string{
		"shop.example.com":  `the certificate for "shop.example.com" is not obtained yet`,
		"SHOP.example.com.": `the certificate for "shop.example.com" is not obtained yet`,
		"":                  `the certificate for "shop.example.com" is not obtained yet`, // no SNI: the first host
		"other.example.com": `no certificate for server name "other.example.com"`,
	} {
		_, err := m.GetCertificate(&tls.ClientHelloInfo{ServerName: sni})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GetCertificate(%q) = %v, want an error containing %q", sni, err, want)
		}
	}
	if m.Ready("shop.example.com") {
		t.Error("Ready before Start")
	}
}

func TestHTTPChallengesIgnoreOtherRequests(t *testing.T) {
	m, err := New(Config{Hosts: []string{"a.example.com"}, Storage: t.TempDir(), HTTP01: true, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := NewHTTPChallenges(m)
	for _, tc := range []struct {
		host, path string
		served     bool
	}{
		{"a.example.com", ChallengePrefix + "tok", true},
		{"a.example.com:5002", ChallengePrefix + "tok", true},
		{"a.example.com", "/other", false},
		{"b.example.com", ChallengePrefix + "tok", false},
	} {
		r := httptest.NewRequest("GET", "http://"+tc.host+tc.path, nil)
		w := httptest.NewRecorder()
		if got := c.Serve(w, r); got != tc.served {
			t.Errorf("Serve(%s%s) = %v, want %v", tc.host, tc.path, got, tc.served)
		}
		if tc.served && w.Code != 404 {
			// No challenge is under way: autocert answers 404.
			t.Errorf("Serve(%s%s) answered %d, want 404", tc.host, tc.path, w.Code)
		}
	}
	var nilc *HTTPChallenges
	if nilc.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "http://a.example.com"+ChallengePrefix+"x", nil)) {
		t.Error("a nil HTTPChallenges served a request")
	}
}

// A certificate found in storage that is near its end is served at once,
// and renewed from the CA in the background: the listener then serves
// the CA's certificate, which is stored in its place. pebble issues
// certificates valid for years, so the near-expiry one is written by the
// test; the renewal is the real tls-alpn-01 exchange with pebble.
func TestNearExpiryCertificateIsRenewedFromTheCA(t *testing.T) {
	const host = "renew.example.com"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := tu.StartPebble(t, tu.PebbleConfig{TLSPort: tu.PortOf(t, ln.Addr().String()), HTTPPort: tu.PortOf(t, tu.DeadAddr(t))})
	dir := t.TempDir()
	old := writeNearExpiryCert(t, dir, host)

	reg := prometheus.NewRegistry()
	m, err := New(Config{Listener: "web", Hosts: []string{host}, Storage: dir, Directory: p.DirectoryURL, RootCAs: caPool(t, p.CAFile), Log: quiet, Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	serveTLS(t, ln, m)
	m.Start()
	tu.WaitFor(t, 10*time.Second, "the stored certificate to be ready", func() bool { return m.Ready(host) })

	roots := p.Roots(t)
	// The served certificate becomes pebble's: a client that trusts only
	// pebble's root completes a handshake.
	var served *x509.Certificate
	tu.WaitFor(t, 60*time.Second, "the renewed certificate to be served", func() bool {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: host, RootCAs: roots})
		if err != nil {
			return false
		}
		defer c.Close()
		served = c.ConnectionState().PeerCertificates[0]
		return true
	})
	if served.SerialNumber.Cmp(old.SerialNumber) == 0 || !served.NotAfter.After(old.NotAfter) {
		t.Fatalf("served certificate serial %v expiring %v, want a new one past %v", served.SerialNumber, served.NotAfter, old.NotAfter)
	}
	// Stored in place of the old one.
	data, err := os.ReadFile(filepath.Join(dir, host))
	if err != nil {
		t.Fatal(err)
	}
	if leaf := parseLeaf(data); leaf == nil || leaf.SerialNumber.Cmp(served.SerialNumber) != 0 {
		t.Fatalf("storage holds %v, want the served certificate %v", leaf, served.SerialNumber)
	}
	if n := value(m.cfg.Metrics.stored.WithLabelValues("web")); n != 1 {
		t.Errorf("certificates_obtained_total = %v, want 1", n)
	}
	if n := value(m.cfg.Metrics.challenges.WithLabelValues("web", "tls-alpn-01")); n < 1 {
		t.Errorf("challenges_total{tls-alpn-01} = %v, want at least 1", n)
	}
	if exp := value(m.cfg.Metrics.expiry.WithLabelValues("web", host)); exp != float64(served.NotAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want %v", exp, served.NotAfter.Unix())
	}
}

// writeNearExpiryCert stores for host, in autocert's format, a
// self-signed certificate with a day left of fifteen.
func writeNearExpiryCert(t *testing.T, dir, host string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-14 * 24 * time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	data = append(data, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	if err := os.WriteFile(filepath.Join(dir, host), data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", file)
	}
	return pool
}

// serveTLS completes TLS handshakes on ln with m's certificates until the
// test ends, and closes each connection after its handshake.
func serveTLS(t *testing.T, ln net.Listener, m *Manager) {
	t.Helper()
	cfg := &tls.Config{GetCertificate: m.GetCertificate, NextProtos: []string{"http/1.1", ALPNProto}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(c, cfg)
				if err := tc.Handshake(); err != nil && !errors.Is(err, io.EOF) {
					return
				}
				io.Copy(io.Discard, tc) // until the client closes
			}()
		}
	}()
	t.Cleanup(func() {
		m.Close()
		ln.Close()
		wg.Wait()
	})
}

// value reads a counter's or gauge's value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}
