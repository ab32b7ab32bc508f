package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultACMEDirectory is Let's Encrypt's production directory, the
// default of tls.acme.directory.
const DefaultACMEDirectory = "https://acme-v02.api.letsencrypt.org/directory"

// ACME gets a TLS listener's certificates from an ACME certificate
// authority, renews them before they expire and keeps them on disk
// (docs/traffic.md, "Automatic certificates (ACME)"). The tls-alpn-01
// challenge is always offered, answered by the listener itself on its
// own port (the CA connects to port 443); http_listener adds http-01.
type ACME struct {
	// Hosts are the DNS names to get certificates for (one each); the
	// first also serves clients that send no server name. Required; no
	// wildcards, no IP addresses, and a name in one acme block only.
	Hosts []string `yaml:"hosts"`
	// Email is the account's contact address, where the CA writes about
	// expiring certificates. Optional.
	Email string `yaml:"email"`
	// Directory is the CA's ACME directory URL (https). Default Let's
	// Encrypt's production directory; its staging directory is
	// https://acme-staging-v02.api.letsencrypt.org/directory.
	Directory string `yaml:"directory"`
	// CAFile is a PEM file of the roots to trust for the CA's own HTTPS
	// endpoints, added to the system's: for a private CA, or pebble.
	CAFile string `yaml:"ca_file"`
	// Storage is the directory that keeps certificates, keys and the
	// account key across restarts (created 0700 if missing). Required.
	Storage string `yaml:"storage"`
	// HTTPListener names a cleartext http listener that answers the CA's
	// http-01 challenges (GET /.well-known/acme-challenge/...) for these
	// hosts, before its routes. The CA connects to port 80, so that
	// listener must be reachable there. Optional: without it only
	// tls-alpn-01 is offered.
	HTTPListener string `yaml:"http_listener"`
}

// checkTLSFilesWithACME reports certificate files beside acme: the
// listener serves one or the other.
func (v *validator) checkTLSFilesWithACME(t *TLS) {
	if t.CertFile != "" {
		v.errorf(&t.CertFile, "tls.cert_file and tls.acme are exclusive: acme obtains the listener's certificates")
	}
	if t.KeyFile != "" {
		v.errorf(&t.KeyFile, "tls.key_file and tls.acme are exclusive: acme obtains the listener's certificates")
	}
	if len(t.Certificates) > 0 {
		v.errorf(&t.Certificates, "tls.certificates and tls.acme are exclusive: acme obtains the listener's certificates")
	}
}

// checkACME checks every listener's tls.acme, and what ties them
// together: a host in one block only, http_listener naming a cleartext
// http listener.
func (v *validator) checkACME() {
	listeners := map[string]*Listener{}
	for i := range v.cfg.Listeners {
		l := &v.cfg.Listeners[i]
		if _, dup := listeners[l.Name]; !dup && l.Name != "" {
			listeners[l.Name] = l
		}
	}
	hosts := map[string]*string{}
	for i := range v.cfg.Listeners {
		l := &v.cfg.Listeners[i]
		if l.TLS == nil || l.TLS.ACME == nil || v.bad(l.TLS.ACME) {
			continue
		}
		if l.Protocol != "" && l.Protocol != "http" {
			continue // tls on a tcp listener is reported already
		}
		a := l.TLS.ACME
		if len(a.Hosts) == 0 && !v.bad(&a.Hosts) {
			v.errorf(&a.Hosts, "tls.acme.hosts is required: the DNS names to get certificates for")
		}
		for j := range a.Hosts {
			h := &a.Hosts[j]
			if err := acmeHostProblem(*h); err != "" {
				v.errorf(h, "tls.acme.hosts: %q %s", *h, err)
				continue
			}
			key := strings.TrimSuffix(strings.ToLower(*h), ".")
			if first := hosts[key]; first != nil {
				v.errorf(h, "tls.acme.hosts: %q is already in an acme block (line %d): one certificate per name", *h, v.line(first))
				continue
			}
			hosts[key] = h
		}
		if a.Email != "" {
			if addr, err := mail.ParseAddress(a.Email); err != nil || addr.Address != a.Email || addr.Name != "" {
				v.errorf(&a.Email, "tls.acme.email %q is not an email address (write it bare: ops@example.com)", a.Email)
			}
		}
		if a.Directory != "" {
			if u, err := url.Parse(a.Directory); err != nil || u.Scheme != "https" || u.Host == "" {
				v.errorf(&a.Directory, "tls.acme.directory %q is not an https URL (the CA's directory, e.g. %s)", a.Directory, DefaultACMEDirectory)
			}
		}
		if a.CAFile != "" && !v.bad(&a.CAFile) {
			if pem, err := v.readFile(a.CAFile); err != nil {
				v.errorf(&a.CAFile, "tls.acme.ca_file %q: %v", a.CAFile, err)
			} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				v.errorf(&a.CAFile, "tls.acme.ca_file %q holds no PEM certificate", a.CAFile)
			}
		}
		switch {
		case a.Storage == "" && !v.bad(&a.Storage):
			v.errorf(&a.Storage, "tls.acme.storage is required: the directory that keeps certificates and the account key across restarts")
		case a.Storage != "":
			if err := storageProblem(a.Storage); err != nil {
				v.errorf(&a.Storage, "tls.acme.storage %q: %v", a.Storage, err)
			}
		}
		if a.HTTPListener != "" {
			hl := listeners[a.HTTPListener]
			switch {
			case hl == nil:
				v.errorf(&a.HTTPListener, "tls.acme.http_listener %q names no listener", a.HTTPListener)
			case hl == l:
				v.errorf(&a.HTTPListener, "tls.acme.http_listener %q is this TLS listener: name a cleartext listener (on port 80)", a.HTTPListener)
			case hl.Protocol != "" && hl.Protocol != "http":
				v.errorf(&a.HTTPListener, "tls.acme.http_listener %q is a %s listener: it must be a cleartext http listener (on port 80)", a.HTTPListener, hl.Protocol)
			case hl.TLS != nil:
				v.errorf(&a.HTTPListener, "tls.acme.http_listener %q terminates TLS: http-01 challenges come in cleartext (on port 80)", a.HTTPListener)
			}
		}
	}
}

// acmeHostProblem says what keeps h from being a name an ACME CA can
// issue a certificate for by tls-alpn-01 or http-01, or "".
func acmeHostProblem(h string) string {
	switch {
	case strings.Contains(h, "*"):
		return "is a wildcard: wildcard certificates need the dns-01 challenge, which switchboard does not answer"
	case func() bool { _, err := netip.ParseAddr(h); return err == nil }():
		return "is an IP address: ACME certificates here are for DNS names"
	case strings.Contains(h, ":"):
		return "has a port: write the name alone"
	case !validHost(h) || strings.Contains(h, "_"):
		return "is not a valid DNS name"
	case !strings.Contains(strings.TrimSuffix(h, "."), "."):
		return "has a single label: a CA issues only for names under a public domain"
	}
	return ""
}

// storageProblem reports why dir cannot hold ACME state: it must be a
// writable directory, or missing with its nearest existing parent a
// writable directory (it is created then).
func storageProblem(dir string) error {
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			if p == filepath.Clean(dir) {
				return errors.New("is not a directory")
			}
			return fmt.Errorf("cannot be created: %s is not a directory", p)
		case err == nil:
			if err := dirWritable(p); err != nil {
				if p == filepath.Clean(dir) {
					return fmt.Errorf("is not writable: %v", err)
				}
				return fmt.Errorf("cannot be created: %s is not writable: %v", p, err)
			}
			return nil
		case errors.Is(err, fs.ErrNotExist) || isNotDir(err):
			parent := filepath.Dir(p)
			if parent == p {
				return err
			}
			p = parent
		default:
			return err
		}
	}
}
