// Package registryopen opens the registry client an entry of a
// configuration's registries block describes (consul, etcd, dns, static):
// one place for the proxy (cmd/switchboard) and the Go client (package
// client), which both read that block.
package registryopen

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/registry"
	consulreg "github.com/switchboard-dev/switchboard/registry/consul"
	dnsreg "github.com/switchboard-dev/switchboard/registry/dns"
	etcdreg "github.com/switchboard-dev/switchboard/registry/etcd"
	staticreg "github.com/switchboard-dev/switchboard/registry/static"
)

// Open builds the registry client an entry of registries describes, and
// the function that closes it (nil when there is nothing to close).
func Open(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	switch rc.Kind {
	case "etcd":
		return openEtcd(rc, log)
	case "consul":
		return openConsul(rc, log)
	case "dns":
		return openDNS(rc, log)
	case "static":
		return openStatic(rc, log)
	}
	return nil, nil, fmt.Errorf("unknown registry kind %q", rc.Kind)
}

// clientTLS builds a *tls.Config from the registry's tls block: the
// same loader as an upstream's (config.LoadClientTLS).
func clientTLS(t *config.ClientTLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c, _, err := config.LoadClientTLS(t)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return c, nil
}

func openEtcd(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	tc, err := clientTLS(rc.TLS)
	if err != nil {
		return nil, nil, err
	}
	eps := rc.Addresses
	if rc.Address != "" {
		eps = append([]string{rc.Address}, eps...)
	}
	r, err := etcdreg.New(etcdreg.Config{Endpoints: eps, Prefix: rc.Prefix, Username: rc.Username, Password: rc.Password, TLS: tc, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return r, r.Close, nil
}

func openConsul(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	c := consulreg.Config{Address: rc.Address, Token: rc.Token, Datacenter: rc.Datacenter, Logger: log}
	if u, err := url.Parse(rc.Address); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		c.Address, c.Scheme = u.Host, u.Scheme
		if u.Port() == "" { // Consul's default ports
			port := "8500"
			if u.Scheme == "https" {
				port = "8501"
			}
			c.Address = net.JoinHostPort(u.Hostname(), port)
		}
	}
	if t := rc.TLS; t != nil {
		c.TLS = &consulreg.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
		if c.Scheme == "" {
			c.Scheme = "https"
		}
	}
	r, err := consulreg.New(c)
	if err != nil {
		return nil, nil, err
	}
	return r, r.Close, nil
}

// openDNS resolves discovery.service as the DNS name (SRV, or A/AAAA with
// the registry's port).
func openDNS(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	c := dnsreg.Config{Type: rc.Record, Port: rc.Port, MinTTL: rc.MinTTL.Std(), MaxTTL: rc.MaxTTL.Std()}
	if rc.Address != "" {
		c.Servers = []string{rc.Address}
	}
	r, err := dnsreg.New(c)
	if err != nil {
		return nil, nil, err
	}
	return r, nil, nil
}

func openStatic(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	r, err := staticreg.NewFile(rc.File, log)
	if err != nil {
		return nil, nil, err
	}
	return r, r.Close, nil
}
