package httpproxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/acme"
)

// listenerTLS is what a TLS listener's handshakes run on, built from its
// tls block and swapped whole on reload: the crypto/tls settings (which
// the listener's server hands each handshake from GetConfigForClient, so
// that a reload reaches the next handshake without a new server) and the
// certificate sources they choose from.
type listenerTLS struct {
	conf    *tls.Config
	files   *CertFiles   // the listener's PEM files, watched
	sources []CertSource // asked before the files (Server.SetCertSources)
	created bool         // files were loaded for this one, not kept from the running listener
}

// newListenerTLS builds the TLS settings of listener lc. files are the
// running listener's, kept when it serves the same files (nil: load
// them).
func newListenerTLS(lc *config.Listener, files *CertFiles, sources []CertSource, log *slog.Logger, m *CertMetrics) (*listenerTLS, error) {
	t := lc.TLS
	lt := &listenerTLS{files: files, sources: sources}
	conf := &tls.Config{
		MinVersion:   config.TLSVersions[t.MinVersion],
		CipherSuites: t.CipherSuiteIDs(),
		NextProtos:   t.ALPN,
		ClientAuth:   t.ClientAuthType(),
	}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS12
	}
	if len(conf.NextProtos) == 0 {
		conf.NextProtos = config.DefaultALPN
	}
	if t.ACME != nil {
		// acme-tls/1 is the tls-alpn-01 challenge, which only a CA's
		// validation asks for; connServer closes such a connection after
		// its handshake.
		conf.NextProtos = append(slices.Clip(conf.NextProtos), acme.ALPNProto)
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("listener %q: tls.client_ca_file: %w", lc.Name, err)
		}
		conf.ClientCAs = x509.NewCertPool()
		if !conf.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("listener %q: tls.client_ca_file %s holds no PEM certificate", lc.Name, t.ClientCAFile)
		}
	}
	if certs := t.Certs(); len(certs) > 0 && lt.files == nil {
		f, err := LoadCertFiles(lc.Name, certs, log, m)
		if err != nil {
			return nil, err
		}
		lt.files, lt.created = f, true
	}
	conf.GetCertificate = lt.getCertificate
	lt.conf = conf
	return lt, nil
}

// getCertificate is the listener's certificate choice: the extra sources
// in order, then the files by server name, then the files' first
// certificate.
func (lt *listenerTLS) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	for _, s := range lt.sources {
		if c, err := s.GetCertificate(hello); c != nil || err != nil {
			return c, err
		}
	}
	if lt.files == nil {
		return nil, fmt.Errorf("no certificate for server name %q", hello.ServerName)
	}
	if c, _ := lt.files.GetCertificate(hello); c != nil {
		return c, nil
	}
	return lt.files.Default(), nil
}

// discard stops the watch of files this one loaded; kept ones go on.
func (lt *listenerTLS) discard() {
	if lt != nil && lt.created {
		lt.files.Close()
	}
}

// replaced stops the watch of lt's files when next does not keep them.
func (lt *listenerTLS) replaced(next *listenerTLS) {
	if lt != nil && lt.files != nil && (next == nil || next.files != lt.files) {
		lt.files.Close()
	}
}

// frontPolicy is what a listener does to every request before routing,
// whatever its route: HSTS, the client certificate's subject for the
// upstream, and redirect_https, which answers instead of routing. A
// table holds it (nil when the listener has none of them), so that it
// changes with a reload as the routes do.
type frontPolicy struct {
	hsts             []string // the Strict-Transport-Security value; nil: none
	clientCertHeader string   // canonical; "": none
	// clientCertHeaders is clientCertHeader alone, for dropVouched.
	clientCertHeaders []string
	redirect          bool
	redirectPort      string // ":8443", or "" for 443
}

const hstsHeader = "Strict-Transport-Security"

// frontPolicyOf returns listener lc's front policy, nil if it has none.
func frontPolicyOf(lc *config.Listener) *frontPolicy {
	p := &frontPolicy{redirect: lc.RedirectHTTPS}
	if p.redirect && lc.RedirectHTTPSPort != 0 && lc.RedirectHTTPSPort != 443 {
		p.redirectPort = ":" + strconv.Itoa(lc.RedirectHTTPSPort)
	}
	if t := lc.TLS; t != nil {
		p.clientCertHeader = t.ClientCertHeader
		if p.clientCertHeader != "" {
			p.clientCertHeaders = []string{p.clientCertHeader}
		}
		if h := t.HSTS; h != nil {
			maxAge := config.DefaultHSTSMaxAge
			if h.MaxAge != nil {
				maxAge = *h.MaxAge
			}
			v := "max-age=" + strconv.FormatInt(int64(maxAge.Std()/time.Second), 10)
			if h.IncludeSubdomains {
				v += "; includeSubDomains"
			}
			if h.Preload {
				v += "; preload"
			}
			p.hsts = []string{v}
		}
	}
	if p.hsts == nil && p.clientCertHeader == "" && !p.redirect {
		return nil
	}
	return p
}

// front applies the table's front policy to a request: HSTS on its
// response, and redirect_https, which answers it. It reports whether the
// request was answered.
func (h *Handler) front(w http.ResponseWriter, r *http.Request, t *Table, st *reqState, start time.Time) bool {
	p := t.front
	p.setHSTS(w.Header(), r)
	if !p.redirect {
		return false
	}
	host, ok := redirectHost(r.Host)
	if !ok {
		h.unrouted(w, r, t, st, start, http.StatusBadRequest, pipeline.CodeBadRequest, "redirect_https: the request has no host name to redirect to")
		return true
	}
	target := r.URL.RequestURI()
	if !strings.HasPrefix(target, "/") { // "*" of OPTIONS *
		target = "/"
	}
	w.Header()["Location"] = []string{"https://" + host + p.redirectPort + target}
	w.Header()["Content-Length"] = []string{"0"}
	w.WriteHeader(http.StatusPermanentRedirect)
	t.noRoute.Count(http.StatusPermanentRedirect)
	h.observed(t, st, w, r, nil, nil, result{status: http.StatusPermanentRedirect}, start)
	return true
}

// redirectHost is the request's host without its port, if it is one an
// https URL may name: a DNS name or an IP address.
func redirectHost(hostport string) (string, bool) {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	switch {
	case host == "":
		return "", false
	case strings.Contains(host, ":"): // IPv6
		if ip := net.ParseIP(host); ip == nil {
			return "", false
		}
		return "[" + host + "]", true
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", false
		}
	}
	return host, true
}

// setHSTS puts the HSTS header in h, for a request that came over TLS
// (browsers ignore it over cleartext, RFC 6797 8.1). It is set again on
// the upstream's answer: the listener's setting wins over one the
// upstream sent.
func (p *frontPolicy) setHSTS(h http.Header, r *http.Request) {
	if p.hsts != nil && r.TLS != nil {
		h[hstsHeader] = p.hsts
	}
}

// clientCert replaces the client certificate header of a request, before
// it is routed: a client's own is removed (with its aliases, see
// dropVouched), and a verified certificate's subject put in its place.
func (p *frontPolicy) clientCert(r *http.Request) {
	if p.clientCertHeader == "" {
		return
	}
	dropVouched(r.Header, p.clientCertHeaders)
	if cs := r.TLS; cs != nil && len(cs.VerifiedChains) > 0 && len(cs.PeerCertificates) > 0 {
		r.Header[p.clientCertHeader] = []string{escapeDNControls(cs.PeerCertificates[0].Subject.String())}
	}
}

// escapeDNControls escapes the control characters of a distinguished
// name as RFC 4514 hex pairs ("\0D"): Name.String leaves them as they
// are, and a name the CA signed as given could otherwise end the header
// line and start another.
func escapeDNControls(dn string) string {
	i := 0
	for i < len(dn) && dn[i] >= ' ' && dn[i] != 0x7f {
		i++
	}
	if i == len(dn) {
		return dn
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(dn)+8)
	b = append(b, dn[:i]...)
	for ; i < len(dn); i++ {
		if c := dn[i]; c < ' ' || c == 0x7f {
			b = append(b, '\\', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// errNoCertSource is returned by Prepare when a TLS listener has neither
// certificate files nor another source.
var errNoCertSource = errors.New("no certificate: set tls.cert_file and tls.key_file, or tls.certificates")
