package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// DefaultDirectory is Let's Encrypt's production directory, the default
// of Config.Directory.
const DefaultDirectory = autocert.DefaultACMEDirectory

// ALPNProto is the ALPN protocol of tls-alpn-01 challenges
// ("acme-tls/1"): a TLS listener served by a Manager lists it in its
// tls.Config's NextProtos, and closes a connection that negotiated it
// after the handshake (the CA only looks at the certificate).
const ALPNProto = acme.ALPNProto

// Config describes what a Manager obtains and from where.
type Config struct {
	// Listener names the listener in logs and metrics.
	Listener string
	// Hosts are the DNS names to get certificates for, one certificate
	// each. The first also serves clients that send no server name.
	// Required; no wildcards (neither challenge can prove one).
	Hosts []string
	// Email is the account's contact address, which the CA writes to
	// about expiring certificates and problems. Optional.
	Email string
	// Directory is the CA's ACME directory URL. Default DefaultDirectory.
	Directory string
	// RootCAs are the roots trusted for the CA's own HTTPS endpoints; nil
	// means the system's.
	RootCAs *x509.CertPool
	// Storage is the directory of certificates, keys and the account key.
	// Required; created (0700) when missing.
	Storage string
	// HTTP01 offers the http-01 challenge as well as tls-alpn-01: a
	// cleartext listener must hand challenge requests to HTTPChallenges.
	HTTP01 bool
	// Log receives one line per certificate obtained, renewed or failed.
	// Default slog.Default().
	Log *slog.Logger
	// Metrics, when set, counts certificates and failures and exports
	// each certificate's expiry.
	Metrics *Metrics
}

// retryDelays are the waits after the first, second ... failed attempt
// to obtain a host's certificate; the last repeats. They grow so that a
// misconfigured host does not spend the CA's failed-validation limit
// (Let's Encrypt: 5 an hour for a host name).
var retryDelays = []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour}

// Manager obtains, stores, renews and serves the certificates of
// Config.Hosts. Create it with New, then Start; Close stops it.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	ac    *autocert.Manager
	http  http.Handler // autocert's http-01 responder; nil without HTTP01
	hosts map[string]*hostState

	ctx     context.Context
	cancel  context.CancelFunc
	started atomic.Bool
	wg      sync.WaitGroup
}

// hostState is what the handshake path reads of a host.
type hostState struct {
	ready atomic.Bool // autocert holds its certificate in memory
}

// New checks cfg and returns a Manager that has not started yet.
func New(cfg Config) (*Manager, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("acme: no hosts")
	}
	if cfg.Storage == "" {
		return nil, errors.New("acme: no storage directory")
	}
	if cfg.Directory == "" {
		cfg.Directory = DefaultDirectory
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	hosts := make([]string, len(cfg.Hosts))
	m := &Manager{log: cfg.Log.With("listener", cfg.Listener), hosts: make(map[string]*hostState, len(cfg.Hosts))}
	for i, h := range cfg.Hosts {
		hosts[i] = normalizeHost(h)
		if !strings.Contains(hosts[i], ".") || strings.Contains(hosts[i], "*") {
			return nil, fmt.Errorf("acme: host %q: not a DNS name with a dot and without a wildcard", h)
		}
		m.hosts[hosts[i]] = &hostState{}
	}
	cfg.Hosts = hosts
	m.cfg = cfg
	m.ctx, m.cancel = context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
	m.ac = &autocert.Manager{
		// The operator agreed to the CA's terms by configuring it, as with
		// Caddy and Traefik.
		Prompt:     autocert.AcceptTOS,
		Cache:      storage{DirCache: autocert.DirCache(cfg.Storage), m: m},
		HostPolicy: m.policy,
		Email:      cfg.Email,
		Client: &acme.Client{
			DirectoryURL: cfg.Directory,
			UserAgent:    "switchboard",
			HTTPClient:   &http.Client{Transport: closingTransport{rt: tr, ctx: m.ctx}},
		},
	}
	if cfg.HTTP01 {
		m.http = m.ac.HTTPHandler(http.NotFoundHandler())
	}
	return m, nil
}

// Hosts returns the host names the manager serves, lower case.
func (m *Manager) Hosts() []string { return append([]string(nil), m.cfg.Hosts...) }

// Start obtains every host's certificate in the background: from
// storage when it is there and valid, else from the CA. It returns at
// once; a host's handshakes succeed from the moment its certificate is
// there (Ready). Calling Start again does nothing.
func (m *Manager) Start() {
	if !m.started.CompareAndSwap(false, true) {
		return
	}
	for _, h := range m.cfg.Hosts {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.obtain(h)
		}()
	}
}

// obtain gets host's certificate, retrying after failures until it has
// it or the manager closes.
func (m *Manager) obtain(host string) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		cert, err := m.ac.GetCertificate(helloFor(host))
		if m.ctx.Err() != nil {
			return
		}
		if err == nil {
			m.hosts[host].ready.Store(true)
			if cert.Leaf != nil {
				m.cfg.Metrics.setExpiry(m.cfg.Listener, host, cert.Leaf.NotAfter)
			}
			m.log.Info("ACME certificate ready", "host", host, "not_after", leafNotAfter(cert), "took", time.Since(start).Round(time.Millisecond))
			return
		}
		m.cfg.Metrics.failed(m.cfg.Listener)
		wait := retryDelays[min(attempt, len(retryDelays)-1)]
		m.log.Error("ACME certificate not obtained", "host", host, "directory", m.cfg.Directory, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-m.ctx.Done():
			t.Stop()
			return
		}
	}
}

// Ready reports whether host's certificate is there to serve.
func (m *Manager) Ready(host string) bool {
	hs := m.hosts[normalizeHost(host)]
	return hs != nil && hs.ready.Load()
}

// GetCertificate is the tls.Config hook: the certificate of the hello's
// server name (of the first host when there is none), or the
// tls-alpn-01 challenge certificate when the CA asks for one. It never
// waits on the network: a host whose certificate is not there yet, or a
// name that is not among the hosts, fails the handshake at once.
//
// Certificates are ECDSA P-256: a client that cannot use one (a TLS 1.2
// client without ECDSA suites, very rare today) fails the handshake.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPNProto {
		// The CA validating tls-alpn-01: autocert answers from memory.
		m.cfg.Metrics.challenge(m.cfg.Listener, "tls-alpn-01")
		return m.ac.GetCertificate(hello)
	}
	name := normalizeHost(hello.ServerName)
	if name == "" {
		name = m.cfg.Hosts[0]
	}
	hs := m.hosts[name]
	if hs == nil {
		return nil, fmt.Errorf("acme: no certificate for server name %q: it is not among the listener's acme hosts", name)
	}
	if !hs.ready.Load() {
		return nil, fmt.Errorf("acme: the certificate for %q is not obtained yet", name)
	}
	// Ready means autocert holds it in memory: no CA, no disk. Asked for
	// as an ECDSA-capable client would, so that autocert never goes for
	// a second (RSA) certificate inside a handshake.
	return m.ac.GetCertificate(helloFor(name))
}

// Close stops obtaining certificates: attempts under way are cut, and
// it returns when they have stopped. Renewal timers of certificates
// already obtained are autocert's and cannot be stopped; a renewal that
// fires after Close fails at once and is retried by autocert much later,
// harmlessly, so a configuration reload that replaces a Manager leaks
// one timer per host.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// policy is autocert's host policy: only the configured hosts, with or
// without a port (the CA's http-01 request carries the port when it is
// not 80, as in tests).
func (m *Manager) policy(_ context.Context, host string) error {
	if m.hosts[normalizeHost(host)] == nil {
		return fmt.Errorf("acme: host %q is not among the listener's acme hosts", host)
	}
	return nil
}

// serveHTTP01 answers an http-01 challenge request.
func (m *Manager) serveHTTP01(w http.ResponseWriter, r *http.Request) {
	m.cfg.Metrics.challenge(m.cfg.Listener, "http-01")
	m.http.ServeHTTP(w, r)
}

// helloFor is a ClientHello for host from a client that takes ECDSA
// certificates, which is what autocert looks at to choose one.
func helloFor(host string) *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{ServerName: host, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}
}

// normalizeHost lower-cases a host name and drops a port and a trailing
// dot.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func leafNotAfter(c *tls.Certificate) time.Time {
	if c.Leaf == nil {
		return time.Time{}
	}
	return c.Leaf.NotAfter
}

// storage is autocert's DirCache, watched: a certificate stored (first
// obtained or renewed) is logged and counted.
type storage struct {
	autocert.DirCache
	m *Manager
}

func (s storage) Put(ctx context.Context, name string, data []byte) error {
	if err := s.DirCache.Put(ctx, name, data); err != nil {
		s.m.log.Error("ACME storage: cannot write", "dir", string(s.DirCache), "name", name, "error", err)
		return err
	}
	if s.m.hosts[name] == nil {
		return nil // the account key, a challenge certificate
	}
	leaf := parseLeaf(data)
	if leaf == nil {
		return nil
	}
	s.m.cfg.Metrics.obtained(s.m.cfg.Listener, name, leaf.NotAfter)
	s.m.log.Info("ACME certificate stored", "host", name, "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter)
	return nil
}

// parseLeaf returns the first certificate of autocert's storage format
// (the key's PEM block, then the chain's), or nil.
func parseLeaf(data []byte) *x509.Certificate {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil
			}
			return c
		}
	}
}

// closingTransport cuts the ACME client's requests when the manager
// closes: autocert gives them contexts of its own, minutes long.
type closingTransport struct {
	rt  http.RoundTripper
	ctx context.Context
}

func (t closingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(t.ctx, cancel)
	resp, err := t.rt.RoundTrip(r.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: func() { stop(); cancel() }}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
