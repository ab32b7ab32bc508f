package httpproxy

import (
	"crypto/x509"
	"fmt"
	"os"
	"slices"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/proxy/acme"
)

// acmeEntry is a listener's ACME manager and the settings it was made
// with: a reload that keeps them keeps the manager (and its certificates
// in memory, its renewal timers).
type acmeEntry struct {
	cfg config.ACME
	m   *acme.Manager
	new bool // made by this change, not started yet
}

// UseACMEMetrics makes the ACME managers of tls.acme listeners count in
// m. Call it before the first Prepare.
func (s *Server) UseACMEMetrics(m *acme.Metrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acmeMetrics = m
}

// prepareACME returns lc's ACME manager: the running one when its
// settings are unchanged, else a new one, not started. Called under s.mu.
func (s *Server) prepareACME(lc *config.Listener) (*acmeEntry, error) {
	a := lc.TLS.ACME
	if old := s.acme[lc.Name]; old != nil && acmeEqual(&old.cfg, a) {
		return &acmeEntry{cfg: old.cfg, m: old.m}, nil
	}
	var roots *x509.CertPool
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("listener %q: tls.acme.ca_file: %w", lc.Name, err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("listener %q: tls.acme.ca_file %q holds no PEM certificate", lc.Name, a.CAFile)
		}
	}
	m, err := acme.New(acme.Config{
		Listener:  lc.Name,
		Hosts:     a.Hosts,
		Email:     a.Email,
		Directory: a.Directory,
		RootCAs:   roots,
		Storage:   a.Storage,
		HTTP01:    a.HTTPListener != "",
		Log:       s.log,
		Metrics:   s.acmeMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
	cfg := *a
	cfg.Hosts = slices.Clone(a.Hosts)
	return &acmeEntry{cfg: cfg, m: m, new: true}, nil
}

func acmeEqual(a, b *config.ACME) bool {
	return slices.Equal(a.Hosts, b.Hosts) && a.Email == b.Email && a.Directory == b.Directory &&
		a.CAFile == b.CAFile && a.Storage == b.Storage && a.HTTPListener == b.HTTPListener
}

// commitACME starts the change's new managers, gives each cleartext
// listener the http-01 responder of the managers that name it, and stops
// the managers the change dropped (in the background: a request to the
// CA under way is cut, which takes a moment). Called under s.mu.
func (s *Server) commitACME(plans []plan, next map[string]*listener) {
	byHTTP := map[string][]*acme.Manager{}
	entries := map[string]*acmeEntry{}
	for _, p := range plans {
		if p.acme == nil {
			continue
		}
		if p.acme.new {
			p.acme.m.Start()
		}
		entries[p.lc.Name] = &acmeEntry{cfg: p.acme.cfg, m: p.acme.m}
		if h := p.lc.TLS.ACME.HTTPListener; h != "" {
			byHTTP[h] = append(byHTTP[h], p.acme.m)
		}
	}
	for name, l := range next {
		if ms := byHTTP[name]; len(ms) > 0 {
			l.handler.acmeHTTP.Store(acme.NewHTTPChallenges(ms...))
		} else {
			l.handler.acmeHTTP.Store(nil)
		}
	}
	for name, old := range s.acme {
		cur := entries[name]
		if cur != nil && cur.m == old.m {
			continue
		}
		for _, h := range old.cfg.Hosts {
			if cur == nil || !slices.Contains(cur.cfg.Hosts, h) {
				s.acmeMetrics.Forget(name, h)
			}
		}
		s.draining.Add(1)
		go func() {
			defer s.draining.Done()
			old.m.Close()
		}()
	}
	s.acme = entries
}

// discardACME closes the managers a discarded change made.
func discardACME(plans []plan) {
	for _, p := range plans {
		if p.acme != nil && p.acme.new {
			p.acme.m.Close()
		}
	}
}
