package httpproxy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func leafNamed(cn string, names ...string) *tls.Certificate {
	return &tls.Certificate{Leaf: &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: names}}
}

func TestCertSetLookupPrefersExactNamesAndOneLabelWildcards(t *testing.T) {
	s := newCertSet([]*tls.Certificate{
		leafNamed("default", "default.test"),
		leafNamed("wild", "*.example.com", "*.EXAMPLE.org."),
		leafNamed("exact", "a.example.com"),
		leafNamed("second-wild", "*.example.com"),
	})
	for sni, want := range map[string]string{
		"a.example.com": "exact", "A.EXAMPLE.COM": "exact", "a.example.com.": "exact",
		"b.example.com": "wild", "b.example.org": "wild",
		"x.b.example.com": "", "example.com": "", "": "", "default.test": "default", "com": "",
	} {
		got := ""
		if c := s.lookup(sni); c != nil {
			got = c.Leaf.Subject.CommonName
		}
		if got != want {
			t.Errorf("lookup(%q) = %q, want %q", sni, got, want)
		}
	}
}

// BenchmarkCertificateBySNI: the choice a TLS listener makes for every
// handshake, among 100 certificates, against a single map lookup (the
// least a choice by name can cost). Run: go test -run '^$' -bench
// CertificateBySNI -benchmem ./proxy/httpproxy
func BenchmarkCertificateBySNI(b *testing.B) {
	var certs []*tls.Certificate
	for i := range 100 {
		certs = append(certs, leafNamed("c", "host"+string(rune('a'+i%26))+string(rune('a'+i/26))+".example.com"))
	}
	certs = append(certs, leafNamed("w", "*.wild.example.com"))
	s := newCertSet(certs)
	lt := &listenerTLS{files: &CertFiles{}}
	lt.files.set.Store(s)
	for _, tc := range []struct{ name, sni string }{{"exact", "hostqb.example.com"}, {"wildcard", "x.wild.example.com"}, {"default", "nothing.test"}} {
		hello := &tls.ClientHelloInfo{ServerName: tc.sni}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c, _ := lt.getCertificate(hello); c == nil {
					b.Fatal("no certificate")
				}
			}
		})
	}
	b.Run("map-peer", func(b *testing.B) {
		b.ReportAllocs()
		m := map[string]*tls.Certificate{"hostqb.example.com": certs[0]}
		for b.Loop() {
			if m["hostqb.example.com"] == nil {
				b.Fatal("no certificate")
			}
		}
	})
}
