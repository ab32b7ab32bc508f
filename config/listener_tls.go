package config

import (
	"crypto/tls"
	"crypto/x509"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Certificate is one certificate of a TLS listener, in PEM files.
type Certificate struct {
	// CertFile holds the certificate chain, leaf first. Required.
	CertFile string `yaml:"cert_file"`
	// KeyFile holds the certificate's private key. Required.
	KeyFile string `yaml:"key_file"`
}

// ListenerTLS are a TLS listener's settings beside its certificates.
type ListenerTLS struct {
	// MinVersion is the lowest TLS version accepted: "1.2" (the default)
	// or "1.3". TLS 1.0 and 1.1 are deprecated (RFC 8996) and refused.
	MinVersion string `yaml:"min_version"`
	// CipherSuites, when set, are the TLS 1.2 cipher suites offered, by
	// their crypto/tls names (TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256...).
	// Insecure suites are refused; TLS 1.3's suites are not configurable.
	// Default: Go's choice.
	CipherSuites []string `yaml:"cipher_suites"`
	// ALPN are the application protocols offered, in order of
	// preference: h2 and http/1.1 (the default, both). [http/1.1] turns
	// HTTP/2 off.
	ALPN []string `yaml:"alpn"`
	// ClientCAFile holds the CA certificates (PEM) that client
	// certificates must chain to; setting it asks clients for one (mTLS).
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is require (the default with client_ca_file: a client
	// without a valid certificate fails the handshake) or verify_if_given
	// (a client may send none; one it sends must be valid).
	ClientAuth string `yaml:"client_auth"`
	// ClientCertHeader names a request header that carries the verified
	// client certificate's subject (RFC 2253, "CN=alice,O=Example") to the
	// upstream. A client's own header of that name is always removed.
	// Default: none.
	ClientCertHeader string `yaml:"client_cert_header"`
	// HSTS adds Strict-Transport-Security to every response of the
	// listener, the proxy's own errors included.
	HSTS *HSTS `yaml:"hsts"`
}

// HSTS is the Strict-Transport-Security header of a TLS listener
// (RFC 6797).
type HSTS struct {
	// MaxAge is how long browsers remember to use https only. Default
	// 8760h (365 days); 0 tells them to forget.
	MaxAge *Duration `yaml:"max_age"`
	// IncludeSubdomains extends the rule to every subdomain.
	IncludeSubdomains bool `yaml:"include_subdomains"`
	// Preload asks browsers to ship the rule built in (hstspreload.org):
	// needs include_subdomains and a max_age of at least a year.
	Preload bool `yaml:"preload"`
}

// Listener TLS defaults.
const (
	DefaultTLSMinVersion = "1.2"
	DefaultClientAuth    = "require"
	DefaultHSTSMaxAge    = Duration(365 * 24 * time.Hour)
)

// DefaultALPN are the protocols a TLS listener offers by default.
var DefaultALPN = []string{"h2", "http/1.1"}

// TLSVersions maps min_version's values to crypto/tls's versions.
var TLSVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// Certs returns the listener's certificates in order: cert_file and
// key_file as the only one, or certificates.
func (t *TLS) Certs() []Certificate {
	if t.CertFile != "" || t.KeyFile != "" {
		return []Certificate{{CertFile: t.CertFile, KeyFile: t.KeyFile}}
	}
	return t.Certificates
}

// CipherSuiteIDs returns the IDs of the cipher_suites names, nil when
// none are set (Go's choice). The names must have passed validation.
func (t *TLS) CipherSuiteIDs() []uint16 {
	if len(t.CipherSuites) == 0 {
		return nil
	}
	ids := make([]uint16, 0, len(t.CipherSuites))
	for _, name := range t.CipherSuites {
		for _, cs := range tls.CipherSuites() {
			if cs.Name == name {
				ids = append(ids, cs.ID)
			}
		}
	}
	return ids
}

// ClientAuthType returns the crypto/tls client authentication that
// client_ca_file and client_auth ask for.
func (t *TLS) ClientAuthType() tls.ClientAuthType {
	switch {
	case t.ClientCAFile == "":
		return tls.NoClientCert
	case t.ClientAuth == "verify_if_given":
		return tls.VerifyClientCertIfGiven
	default:
		return tls.RequireAndVerifyClientCert
	}
}

// applyTLSDefaults fills in an http listener's TLS and h2c defaults.
func applyTLSDefaults(l *Listener) {
	t := l.TLS
	if t == nil {
		if l.H2C == nil {
			l.H2C = ptr(true)
		}
		return
	}
	setDefault(&t.MinVersion, DefaultTLSMinVersion)
	if t.ALPN == nil {
		t.ALPN = slices.Clone(DefaultALPN)
	}
	if t.ClientCAFile != "" {
		setDefault(&t.ClientAuth, DefaultClientAuth)
	}
	if t.ClientCertHeader != "" {
		t.ClientCertHeader = textproto.CanonicalMIMEHeaderKey(t.ClientCertHeader)
	}
	if h := t.HSTS; h != nil && h.MaxAge == nil {
		h.MaxAge = ptr(DefaultHSTSMaxAge)
	}
}

// checkTLS checks a listener's tls block: the certificates (files that
// read and parse, each key matching its certificate), versions, suites,
// ALPN, client certificates and HSTS.
func (v *validator) checkTLS(t *TLS) {
	switch {
	case t.ACME != nil:
		v.checkTLSFilesWithACME(t) // the rest: checkACME
	case len(t.Certificates) > 0 && (t.CertFile != "" || t.KeyFile != ""):
		at := any(&t.CertFile)
		if t.CertFile == "" {
			at = &t.KeyFile
		}
		v.keyErrorf(at, "tls: cert_file and key_file are the one-certificate form of certificates; use one of them")
	case len(t.Certificates) > 0:
		for i := range t.Certificates {
			c := &t.Certificates[i]
			v.checkKeyPair(c, &c.CertFile, &c.KeyFile, "tls.certificates["+strconv.Itoa(i)+"].")
		}
	case v.present(&t.Certificates) && !v.bad(&t.Certificates):
		v.errorf(&t.Certificates, "tls.certificates is empty: list at least one {cert_file, key_file}")
	default:
		v.checkKeyPair(t, &t.CertFile, &t.KeyFile, "tls.")
	}

	if t.MinVersion != "" && !v.bad(&t.MinVersion) {
		switch t.MinVersion {
		case "1.2", "1.3":
		case "1.0", "1.1":
			v.errorf(&t.MinVersion, "tls.min_version %s is deprecated (RFC 8996) and not accepted; the lowest is 1.2", t.MinVersion)
		default:
			v.errorf(&t.MinVersion, "unknown tls.min_version %q (known: 1.2, 1.3)", t.MinVersion)
		}
	}
	v.checkCipherSuites(t)
	if v.present(&t.ALPN) && !v.bad(&t.ALPN) {
		if len(t.ALPN) == 0 {
			v.errorf(&t.ALPN, "tls.alpn is empty: list h2, http/1.1 or both")
		}
		for i, p := range t.ALPN {
			switch {
			case p != "h2" && p != "http/1.1":
				v.errorf(&t.ALPN[i], "unknown tls.alpn protocol %q (known: h2, http/1.1)", p)
			case slices.Index(t.ALPN, p) < i:
				v.errorf(&t.ALPN[i], "tls.alpn lists %q twice", p)
			}
		}
	}

	switch t.ClientAuth {
	case "", "require", "verify_if_given":
		if t.ClientAuth != "" && t.ClientCAFile == "" {
			v.errorf(&t.ClientAuth, "tls.client_auth needs tls.client_ca_file, the CAs that client certificates are verified against")
		}
	default:
		v.errorf(&t.ClientAuth, "unknown tls.client_auth %q (known: require, verify_if_given)", t.ClientAuth)
	}
	if f := t.ClientCAFile; f != "" && !v.bad(&t.ClientCAFile) {
		if pem, err := v.readFile(f); err != nil {
			v.errorf(&t.ClientCAFile, "tls.client_ca_file %q: %v", f, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			v.errorf(&t.ClientCAFile, "tls.client_ca_file %q holds no PEM certificate", f)
		}
	}
	if h := t.ClientCertHeader; h != "" {
		switch {
		case !isToken(h):
			v.errorf(&t.ClientCertHeader, "tls.client_cert_header %q is not a valid header name", h)
		case t.ClientCAFile == "":
			v.errorf(&t.ClientCertHeader, "tls.client_cert_header needs tls.client_ca_file: without it no client certificate is asked for")
		}
	}

	if h := t.HSTS; h != nil && !v.bad(h) {
		maxAge := DefaultHSTSMaxAge
		if h.MaxAge != nil {
			maxAge = *h.MaxAge
		}
		if h.Preload && (!h.IncludeSubdomains || maxAge < DefaultHSTSMaxAge) {
			v.keyErrorf(&h.Preload, "hsts.preload needs include_subdomains: true and a max_age of at least 8760h (365 days), as the preload list requires")
		}
	}
}

// checkKeyPair checks one certificate: both files named, readable, and a
// key that matches the certificate. at is where a missing file is
// reported; prefix names the keys ("tls." or "tls.certificates[1].").
func (v *validator) checkKeyPair(at any, certFile, keyFile *string, prefix string) {
	if *certFile == "" {
		v.errorf(certFile, "%scert_file is required", prefix)
	}
	if *keyFile == "" {
		v.errorf(keyFile, "%skey_file is required", prefix)
	}
	if *certFile == "" || *keyFile == "" || v.bad(certFile) || v.bad(keyFile) {
		return
	}
	cert, cerr := v.readFile(*certFile)
	if cerr != nil {
		v.errorf(certFile, "%scert_file %q: %v", prefix, *certFile, cerr)
	}
	key, kerr := v.readFile(*keyFile)
	if kerr != nil {
		v.errorf(keyFile, "%skey_file %q: %v", prefix, *keyFile, kerr)
	}
	if cerr != nil || kerr != nil {
		return
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		v.errorf(certFile, "%scert_file %q and %skey_file %q are not a usable key pair: %v", prefix, *certFile, prefix, *keyFile, err)
	}
}

// checkCipherSuites checks tls.cipher_suites: names crypto/tls knows as
// secure TLS 1.2 suites.
func (v *validator) checkCipherSuites(t *TLS) {
	if !v.present(&t.CipherSuites) || v.bad(&t.CipherSuites) {
		return
	}
	if len(t.CipherSuites) == 0 {
		v.errorf(&t.CipherSuites, "tls.cipher_suites is empty: leave it out for Go's choice")
		return
	}
	if t.MinVersion == "1.3" {
		v.keyErrorf(&t.CipherSuites, "tls.cipher_suites are TLS 1.2 suites; with min_version 1.3 they are never used (TLS 1.3's suites are not configurable)")
		return
	}
	var known []string
	for _, cs := range tls.CipherSuites() {
		if !slices.Contains(cs.SupportedVersions, tls.VersionTLS13) {
			known = append(known, cs.Name)
		}
	}
	for i, name := range t.CipherSuites {
		if slices.Contains(known, name) {
			if slices.Index(t.CipherSuites, name) < i {
				v.errorf(&t.CipherSuites[i], "tls.cipher_suites lists %s twice", name)
			}
			continue
		}
		why := "unknown tls.cipher_suites name " + `"` + name + `"`
		for _, cs := range tls.InsecureCipherSuites() {
			if cs.Name == name {
				why = "tls.cipher_suites: " + name + " is insecure and not accepted"
			}
		}
		for _, cs := range tls.CipherSuites() {
			if cs.Name == name {
				why = "tls.cipher_suites: " + name + " is a TLS 1.3 suite, which Go always enables and does not let you choose"
			}
		}
		v.errorf(&t.CipherSuites[i], "%s (known: %s)", why, strings.Join(known, ", "))
	}
}

// checkListenerFront checks an http listener's h2c and redirect_https
// against its tls and routes.
func (v *validator) checkListenerFront(l *Listener) {
	if l.TLS != nil && v.present(&l.H2C) {
		v.keyErrorf(&l.H2C, "h2c is for listeners without tls; a TLS listener offers HTTP/2 by ALPN (tls.alpn)")
	}
	if l.RedirectHTTPS {
		switch {
		case l.TLS != nil:
			v.keyErrorf(&l.RedirectHTTPS, "redirect_https is for listeners without tls: it sends their clients to a TLS listener")
		case len(l.Routes) > 0:
			v.keyErrorf(&l.Routes, "routes are never used: redirect_https answers every request of this listener")
		case l.AutoRoutes:
			v.keyErrorf(&l.AutoRoutes, "auto_routes are never used: redirect_https answers every request of this listener")
		}
	}
	if v.present(&l.RedirectHTTPSPort) && !v.bad(&l.RedirectHTTPSPort) {
		switch p := l.RedirectHTTPSPort; {
		case !l.RedirectHTTPS:
			v.keyErrorf(&l.RedirectHTTPSPort, "redirect_https_port needs redirect_https: true")
		case p < 1 || p > 65535:
			v.errorf(&l.RedirectHTTPSPort, "redirect_https_port %d is outside 1-65535", p)
		}
	}
}
