package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/registry"
)

// Config is a client configuration read from YAML: the proxy file's
// upstreams and routes (with the same keys, checks and defaults) and its
// discovery block. See config.Client for the keys a client does not use.
type Config = config.Client

// LoadConfig reads the client configuration file at path. A file with
// problems gives a config.Errors value listing every one as
// FILE:LINE:COL: message, the way `switchboard validate` prints them.
func LoadConfig(path string) (*Config, error) { return config.LoadClient(path) }

// ParseConfig reads a client configuration from data; name names it in
// problems (a file name, usually).
func ParseConfig(data []byte, name string) (*Config, error) { return config.ParseClient(name, data) }

// WithConfig declares the upstreams of cfg as services, each with the
// routes that name it (in their order; a call that matches none of them
// gets the zero pipeline.Config: sent once, plus the safe retries). An
// upstream with discovery follows the registry its discovery.registry
// names: an entry of the registries block, which New opens (and Close
// closes), or one given with WithRegistry, which wins over an entry of the
// same name. The connection settings
// of an upstream (protocol, tls, timeouts, max_idle_per_endpoint,
// idle_timeout, max_response_header_bytes) shape a transport of its own
// (the tls block's files are read here, and its settings reach the
// upstream's health checks too); the discovery
// block tunes the discovery caches (cache_dir, empty_grace).
func WithConfig(cfg *Config) Option {
	return func(o *options) error {
		if cfg == nil {
			return fmt.Errorf("client: nil configuration")
		}
		if len(cfg.Registries) > 0 && o.backends == nil {
			o.backends = map[string]*config.RegistryBackend{}
		}
		for name, b := range cfg.Registries {
			o.backends[name] = b
		}
		o.yamlDisc = &cfg.Discovery
		routes := map[string][]Route{}
		for i := range cfg.Routes {
			r := &cfg.Routes[i]
			pc := r.Config
			if r.Timeout != nil {
				pc.Timeout = r.Timeout.Std()
			}
			m := Match{Methods: r.Match.Methods, Headers: r.Match.Headers}
			if r.Match.PathPrefix != "/" {
				m.PathPrefix = r.Match.PathPrefix
			}
			routes[r.Upstream] = append(routes[r.Upstream], Route{Name: r.Name, Match: m, Pipeline: pc})
		}
		for _, name := range sortedNames(cfg.Upstreams) {
			u := cfg.Upstreams[name]
			tc, _, err := u.LoadTLS()
			if err != nil {
				return fmt.Errorf("%s: upstream %q: tls: %w", cfg.File, name, err)
			}
			t := upstreamTransport(u, tc)
			o.owned = append(o.owned, t)
			s := Service{Upstream: u.Config, Routes: routes[name], Transport: t, fromYAML: true, tls: tc != nil}
			s.Upstream.Health = config.HealthOverTLS(s.Upstream.Health, tc)
			if d := u.Discovery; d != nil {
				s.Registry = d.Registry
				s.Query = &registry.Query{Service: d.Service, Tags: d.Tags, PassingOnly: d.PassingOnly == nil || *d.PassingOnly}
			}
			if err := WithService(name, s)(o); err != nil {
				return fmt.Errorf("%s: %w", cfg.File, err)
			}
		}
		return nil
	}
}

// upstreamTransport is the transport to an upstream's endpoints that its
// connection settings describe, as the proxy's would: with tc (nil for a
// cleartext upstream), TLS with HTTP/2 or HTTP/1.1 by ALPN, or HTTP/1.1
// only for protocol http1.
func upstreamTransport(u *config.Upstream, tc *tls.Config) *http.Transport {
	maxIdle := config.DefaultMaxIdlePerEndpoint
	if u.MaxIdlePerEndpoint != nil {
		maxIdle = *u.MaxIdlePerEndpoint
	}
	t := defaultTransport(maxIdle)
	if maxIdle == 0 {
		t.DisableKeepAlives = true
	}
	t.DialContext = (&net.Dialer{Timeout: u.Timeouts.Connect.Std(), KeepAlive: defaultKeepAlive}).DialContext
	t.ResponseHeaderTimeout = u.Timeouts.ResponseHeader.Std()
	t.IdleConnTimeout = u.IdleTimeout.Std()
	t.MaxResponseHeaderBytes = int64(u.MaxResponseHeaderBytes)
	switch {
	case tc != nil:
		c := tc.Clone()
		c.ClientSessionCache = tls.NewLRUClientSessionCache(0)
		c.NextProtos = []string{"http/1.1"}
		if u.Protocol == config.ProtocolHTTPS {
			c.NextProtos = []string{"h2", "http/1.1"}
		}
		// The proxy's dial: a failed handshake is a connect failure.
		d, timeout := &net.Dialer{KeepAlive: defaultKeepAlive}, u.Timeouts.Connect.Std()
		t.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return pipeline.DialTLS(ctx, d, c, addr)
		}
		t.ForceAttemptHTTP2 = u.Protocol == config.ProtocolHTTPS
		var p http.Protocols
		p.SetHTTP1(true)
		if u.Protocol == config.ProtocolHTTPS {
			p.SetHTTP2(true)
		}
		t.Protocols = &p
	case u.Protocol == "h2c":
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
	}
	return t
}
