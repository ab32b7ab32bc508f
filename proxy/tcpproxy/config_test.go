package tcpproxy

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestConfigValidateNamesTheField(t *testing.T) {
	base := func() Config { return Config{Name: "l", Upstream: "u"} }
	tests := []struct {
		name string
		mod  func(c *Config)
		want []string
	}{
		{"no name", func(c *Config) { c.Name = "" }, []string{"name: required"}},
		{"no upstream, no sni", func(c *Config) { c.Upstream = "" }, []string{"upstream: required"}},
		{"sni route without upstream", func(c *Config) { c.SNI = []SNIRoute{{Names: []string{"a.example.com"}}} }, []string{"sni[0].upstream: required"}},
		{"sni route without names", func(c *Config) { c.SNI = []SNIRoute{{Upstream: "u"}} }, []string{"sni[0].names: at least one"}},
		{"bad wildcard", func(c *Config) {
			c.SNI = []SNIRoute{{Names: []string{"a.example.com", "a.*.example.com"}, Upstream: "u"}}
		}, []string{"sni[0].names[1]: \"a.*.example.com\": \"*\" is allowed only as the whole leftmost label"}},
		{"wildcard over a TLD", func(c *Config) { c.SNI = []SNIRoute{{Names: []string{"*.com"}, Upstream: "u"}} }, []string{"sni[0].names[0]", "at least two labels"}},
		{"bad character", func(c *Config) { c.SNI = []SNIRoute{{Names: []string{"a b.com"}, Upstream: "u"}} }, []string{"sni[0].names[0]", "not allowed"}},
		{"empty label", func(c *Config) { c.SNI = []SNIRoute{{Names: []string{"a..com"}, Upstream: "u"}} }, []string{"sni[0].names[0]", "empty label"}},
		{"duplicate across routes", func(c *Config) {
			c.SNI = []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "u"}, {Names: []string{"x.com", "A.Example.com"}, Upstream: "v"}}
		}, []string{"sni[1].names[1]: \"A.Example.com\" is already routed by sni[0].names[0]"}},
		{"negative timeouts", func(c *Config) {
			c.SNITimeout, c.ConnectTimeout, c.QueueTimeout, c.ProxyProtocolTimeout = -1, -1, -1, -1
		}, []string{"sni_timeout", "connect_timeout", "queue_timeout", "proxy_protocol_timeout"}},
		{"tiny idle timeout", func(c *Config) { c.IdleTimeout = time.Microsecond }, []string{"idle_timeout: 1µs"}},
		{"attempts", func(c *Config) { c.ConnectAttempts = 17 }, []string{"connect_attempts: 17: must be 1 to 16"}},
		{"negative limits", func(c *Config) { c.MaxConns, c.MaxConnsPerEndpoint, c.QueueSize = -1, -1, -1 },
			[]string{"max_conns: -1", "max_conns_per_endpoint: -1", "queue_size: -1"}},
		{"queue without limit", func(c *Config) { c.QueueSize = 10 }, []string{"queue_size: 10: a queue needs max_conns"}},
		{"send v3", func(c *Config) { c.SendProxyProtocol = "v3" }, []string{"send_proxy_protocol: \"v3\""}},
		{"accept without trust", func(c *Config) { c.AcceptProxyProtocol = true }, []string{"trusted_proxies: required with accept_proxy_protocol"}},
		{"trust without accept", func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} },
			[]string{"trusted_proxies: set, but accept_proxy_protocol is false"}},
		{"invalid prefix", func(c *Config) {
			c.AcceptProxyProtocol = true
			c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}}
		}, []string{"trusted_proxies[1]: not a valid CIDR prefix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigValidAndDefaults(t *testing.T) {
	c := Config{Name: "l", SNI: []SNIRoute{{Names: []string{"a.example.com", "*.b.example.com", "x_y.example.com"}, Upstream: "u"}},
		AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		SendProxyProtocol: "v2", MaxConns: 10, QueueSize: 5}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	s, err := compile(c)
	if err != nil {
		t.Fatal(err)
	}
	d := s.cfg
	if d.SNITimeout != 5*time.Second || d.ConnectTimeout != 5*time.Second || d.ConnectAttempts != 3 ||
		d.IdleTimeout != 10*time.Minute || d.QueueTimeout != 5*time.Second || d.ProxyProtocolTimeout != 5*time.Second {
		t.Errorf("defaults: %+v", d)
	}
	if s.checkEvery != 10*time.Second {
		t.Errorf("checks every %v with the default idle timeout, want 10s", s.checkEvery)
	}
	for name, want := range map[string]string{"a.example.com": "u", "q.b.example.com": "u", "b.example.com": "", "a.b.b.example.com": "", "": ""} {
		if got := s.route(name); got != want {
			t.Errorf("route(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestNewListenerRejectsBadInput(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	none := func(string) Upstream { return nil }
	if _, err := NewListener(ln, Config{Name: "l"}, none, nil, nil); err == nil || !strings.Contains(err.Error(), "upstream: required") {
		t.Errorf("bad config: %v", err)
	}
	if _, err := NewListener(ln, Config{Name: "l", Upstream: "u"}, nil, nil, nil); err == nil {
		t.Error("nil upstreams func accepted")
	}
	if _, err := NewListener(nil, Config{Name: "l", Upstream: "u"}, none, nil, nil); err == nil {
		t.Error("nil listener accepted")
	}
}
