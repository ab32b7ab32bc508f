package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// upstreamTLSConfig is a config whose upstream u has protocol proto (if
// set) on line 8 and a tls block from line 9 with the keys given, one a
// line, in the order ca_file, cert_file, key_file, min_version.
func upstreamTLSConfig(proto string, keys ...string) string {
	var b strings.Builder
	b.WriteString("listeners:\n  - name: web\n    listen: ':8443'\n    routes: [{upstream: u}]\nupstreams:\n  u:\n    targets: [{address: 'a:1'}]\n")
	if proto != "" {
		b.WriteString("    protocol: " + proto + "\n")
	} else {
		b.WriteString("    idle_timeout: 60s\n")
	}
	b.WriteString("    tls:\n")
	for _, k := range keys {
		b.WriteString("      " + k + "\n")
	}
	return b.String()
}

func TestUpstreamTLSIsLoadedAndDefaultsToHTTPS(t *testing.T) {
	ca := testutil.NewTestCA(t)
	_, cert, key := ca.Issue(t, "proxy")
	cfg := mustParse(t, upstreamTLSConfig("", "ca_file: "+ca.CAFile, "cert_file: "+cert, "key_file: "+key, "server_name: orders.internal", "min_version: '1.3'"))
	u := cfg.Upstreams["u"]
	if u.Protocol != ProtocolHTTPS || !u.UsesTLS() {
		t.Fatalf("protocol %q with a tls block; want %q", u.Protocol, ProtocolHTTPS)
	}
	c, sum, err := u.LoadTLS()
	if err != nil {
		t.Fatal(err)
	}
	if c.ServerName != "orders.internal" || c.MinVersion != tls.VersionTLS13 || len(c.Certificates) != 1 || c.RootCAs == nil || c.InsecureSkipVerify {
		t.Fatalf("tls.Config: server name %q, min version %x, %d certificates, roots %v, insecure %v",
			c.ServerName, c.MinVersion, len(c.Certificates), c.RootCAs != nil, c.InsecureSkipVerify)
	}
	if _, again, _ := u.LoadTLS(); again != sum {
		t.Error("two loads of the same files have different sums")
	}
	// The sum follows the files' contents: a renewed CA is a change.
	testutil.CopyFile(t, testutil.NewTestCA(t).CAFile, ca.CAFile)
	if _, changed, err := u.LoadTLS(); err != nil || changed == sum {
		t.Errorf("after the CA file changed: sum unchanged %v, err %v", changed == sum, err)
	}
}

func TestUpstreamProtocolHTTPSWithoutTLSBlockUsesSystemRoots(t *testing.T) {
	cfg := mustParse(t, "listeners:\n  - name: web\n    listen: ':8443'\n    routes: [{upstream: u}]\nupstreams:\n  u: {protocol: https, targets: [{address: 'a:1'}]}\n")
	c, _, err := cfg.Upstreams["u"].LoadTLS()
	if err != nil {
		t.Fatal(err)
	}
	if c == nil || c.RootCAs != nil || c.MinVersion != tls.VersionTLS12 || c.ServerName != "" {
		t.Fatalf("tls.Config %+v; want the system roots, TLS 1.2 and the endpoint's host as name", c)
	}
	plain := mustParse(t, "listeners:\n  - name: web\n    listen: ':8443'\n    routes: [{upstream: u}]\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n")
	if c, _, err := plain.Upstreams["u"].LoadTLS(); c != nil || err != nil {
		t.Fatalf("a cleartext upstream has TLS %v, %v", c, err)
	}
}

func TestUpstreamTLSProblems(t *testing.T) {
	ca := testutil.NewTestCA(t)
	_, cert, key := ca.Issue(t, "proxy")
	_, _, otherKey := ca.Issue(t, "other")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		proto string
		keys  []string
		want  []string
	}{
		{"ca_file not PEM", "https", []string{"ca_file: " + garbage}, []string{
			`lb.yaml:10:16: tls.ca_file: "` + garbage + `" holds no PEM certificate`,
		}},
		{"ca_file missing", "", []string{"ca_file: " + dir + "/nope.pem"}, []string{
			`lb.yaml:10:16: tls.ca_file: "` + dir + `/nope.pem": no such file or directory`,
		}},
		{"cert_file without key_file", "", []string{"cert_file: " + cert}, []string{
			`lb.yaml:9:5: tls.key_file: cert_file and key_file go together: a client certificate needs both`,
		}},
		{"mismatched pair", "", []string{"cert_file: " + cert, "key_file: " + otherKey}, []string{
			`lb.yaml:10:18: tls.cert_file: "` + cert + `" and key_file "` + otherKey + `" are not a usable key pair: tls: private key does not match public key`,
		}},
		{"min_version", "", []string{"min_version: '1.1'"}, []string{
			`lb.yaml:10:20: tls.min_version: unknown TLS version "1.1" (known: 1.2, 1.3)`,
		}},
		{"h2c with tls", "h2c", []string{"cert_file: " + cert, "key_file: " + key}, []string{
			`lb.yaml:8:15: protocol h2c is cleartext HTTP/2 and upstream "u" has a tls block; for HTTP/2 over TLS use protocol: https`,
		}},
		{"unknown protocol", "http3", nil, []string{
			`lb.yaml:8:15: unknown upstream protocol "http3" (known: http1, h2c, https)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLines(t, problemLines(t, "lb.yaml", upstreamTLSConfig(tt.proto, tt.keys...)), tt.want)
		})
	}
}

// A registry's tls block is judged by the same loader as an upstream's.
func TestRegistryTLSIsCheckedAsAnUpstreams(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := "registries:\n  c:\n    kind: consul\n    address: 127.0.0.1:8500\n    tls: {min_version: '1.0', ca_file: " + garbage + "}\nlisteners:\n  - name: web\n    listen: ':8443'\n    routes: [{upstream: u}]\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
	checkLines(t, problemLines(t, "lb.yaml", src), []string{
		`lb.yaml:5:24: tls.min_version: unknown TLS version "1.0" (known: 1.2, 1.3)`,
		`lb.yaml:5:40: tls.ca_file: "` + garbage + `" holds no PEM certificate`,
	})
}

// upstreamTLSDocFiles maps the certificate files that the examples of the
// docs name (upstream and registry tls blocks) to real ones of a test CA.
func upstreamTLSDocFiles(t *testing.T) map[string]string {
	ca := testutil.NewTestCA(t)
	_, cert, key := ca.Issue(t, "proxy")
	return map[string]string{
		"/etc/switchboard/internal-ca.pem": ca.CAFile,
		"/etc/switchboard/orders-ca.pem":   ca.CAFile,
		"/etc/switchboard/proxy.crt":       cert,
		"/etc/switchboard/proxy.key":       key,
		"/etc/consul/ca.pem":               ca.CAFile,
	}
}
