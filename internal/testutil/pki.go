package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a throw-away certificate authority: it issues server and client
// certificates for tests of TLS listeners (SNI, client certificates).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serials atomic.Int64

// NewCA returns a new CA whose certificate names it cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serials.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key}
}

// WriteCert writes the CA's certificate to dir/NAME.pem and returns the
// path.
func (ca *CA) WriteCert(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".pem")
	writePEM(t, path, "CERTIFICATE", ca.Cert.Raw)
	return path
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for dnsNames and
// writes it and its key to dir as NAME.crt and NAME.key.
func (ca *CA) Server(t testing.TB, dir, name string, dnsNames ...string) (certFile, keyFile string) {
	t.Helper()
	cert := ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return writeKeyPair(t, dir, name, cert)
}

// Client issues a client certificate for subject.
func (ca *CA) Client(t testing.TB, subject pkix.Name) tls.Certificate {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serials.Add(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writeKeyPair(t testing.TB, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", cert.Certificate[0])
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCA is a CA whose root and certificates live in files of a temporary
// directory: for configurations that name PEM files (upstream TLS).
type TestCA struct {
	*CA
	// Pool holds the root; CAFile is the root in a PEM file.
	Pool   *x509.CertPool
	CAFile string
	dir    string
}

// NewTestCA makes a CA whose files live in a temporary directory of t.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	ca, dir := NewCA(t, "switchboard test CA"), t.TempDir()
	return &TestCA{CA: ca, Pool: ca.Pool(), CAFile: ca.WriteCert(t, dir, "ca"), dir: dir}
}

// Issue returns a certificate signed by the CA for hosts (DNS names or IP
// addresses), good for a server and for a client, and the paths of its
// PEM files, named after name.
func (ca *TestCA) Issue(t testing.TB, name string, hosts ...string) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	cert = ca.issue(t, tmpl)
	certFile, keyFile = writeKeyPair(t, ca.dir, name, cert)
	return cert, certFile, keyFile
}

// CopyFile copies the file at from to to (a certificate renewed in
// place, say).
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
