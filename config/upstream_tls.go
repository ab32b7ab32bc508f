package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/upstream"
)

// ProtocolHTTPS is the upstream protocol that speaks TLS to the endpoints,
// HTTP/2 or HTTP/1.1 as each endpoint chooses by ALPN.
const ProtocolHTTPS = "https"

// TLSSum identifies TLS settings with the contents of the files they
// name: two loads with the same sum build the same tls.Config.
type TLSSum [sha256.Size]byte

// UsesTLS reports whether the proxy speaks TLS to u's endpoints: protocol
// https, or a tls block.
func (u *Upstream) UsesTLS() bool { return u.Protocol == ProtocolHTTPS || u.TLS != nil }

// LoadTLS builds the tls.Config the proxy (or a client) speaks to u's
// endpoints with, reading the files of its tls block; nil when u is
// cleartext. See LoadClientTLS.
func (u *Upstream) LoadTLS() (*tls.Config, TLSSum, error) {
	if !u.UsesTLS() {
		return nil, TLSSum{}, nil
	}
	t := u.TLS
	if t == nil {
		t = &ClientTLS{}
	}
	return LoadClientTLS(t)
}

// LoadClientTLS reads the files t names and builds a client tls.Config:
// RootCAs from ca_file (nil, the system roots, without it), the client
// certificate, ServerName, InsecureSkipVerify and MinVersion (TLS 1.2
// unless min_version says 1.3). sum identifies the settings and the
// files' contents, so that a reload that changed neither can keep what it
// built from them (connections, session caches, health checks). Its
// errors are field errors naming the key (ca_file, cert_file, ...).
func LoadClientTLS(t *ClientTLS) (c *tls.Config, sum TLSSum, err error) {
	return loadClientTLS(t, readSmallFile)
}

func loadClientTLS(t *ClientTLS, read func(string) ([]byte, error)) (*tls.Config, TLSSum, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %t %q\n", t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.InsecureSkipVerify, t.MinVersion)
	c := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	var errs []error
	v, err := tlsVersion(t.MinVersion)
	if err != nil {
		errs = append(errs, field.Errorf("min_version", "%v", err))
	}
	c.MinVersion = v
	if (t.CertFile == "") != (t.KeyFile == "") {
		key := "key_file"
		if t.CertFile == "" {
			key = "cert_file"
		}
		errs = append(errs, field.Errorf(key, "cert_file and key_file go together: a client certificate needs both"))
	}
	readPEM := func(key, path string) []byte {
		if path == "" {
			return nil
		}
		b, err := read(path)
		if err != nil {
			errs = append(errs, field.Errorf(key, "%q: %v", path, err))
			return nil
		}
		h.Write(b)
		return b
	}
	if ca := readPEM("ca_file", t.CAFile); ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			errs = append(errs, field.Errorf("ca_file", "%q holds no PEM certificate", t.CAFile))
		}
		c.RootCAs = pool
	}
	cert, key := readPEM("cert_file", t.CertFile), readPEM("key_file", t.KeyFile)
	if cert != nil && key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			errs = append(errs, field.Errorf("cert_file", "%q and key_file %q are not a usable key pair: %v", t.CertFile, t.KeyFile, err))
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if len(errs) > 0 {
		return nil, TLSSum{}, errors.Join(errs...)
	}
	var sum TLSSum
	h.Sum(sum[:0])
	return c, sum, nil
}

// tlsVersion is the tls version a min_version names ("" is 1.2).
func tlsVersion(s string) (uint16, error) {
	switch s {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unknown TLS version %q (known: 1.2, 1.3)", s)
}

// checkUpstreamTLS checks u's protocol against its tls block and loads
// the block's files, so that a certificate that cannot be used is a
// problem of the file, placed at its key, and not of the first request.
func (v *validator) checkUpstreamTLS(name string, u *Upstream) {
	t := u.TLS
	if t == nil || v.bad(t) {
		return
	}
	if u.Protocol == "h2c" {
		v.errorf(&u.Protocol, "protocol h2c is cleartext HTTP/2 and upstream %q has a tls block; for HTTP/2 over TLS use protocol: https", name)
	}
	_, _, err := loadClientTLS(t, v.readFile)
	v.place(field.Prefix("tls", err), u)
}

// HealthOverTLS returns h with its active checks speaking TLS with c, as
// the traffic to the upstream does (nil c: h as it is). h's own active
// block is not changed.
func HealthOverTLS(h upstream.Health, c *tls.Config) upstream.Health {
	if c == nil || h.Active == nil {
		return h
	}
	a := *h.Active
	a.TLS = c
	h.Active = &a
	return h
}
