package config

import (
	"os"
	"path/filepath"
	"testing"
)

// acmeConfig is a TLS listener "web" with the acme block acme (indented
// under tls:, lines from 5 on) and a cleartext listener "plain" at line
// acmePlainLine.
func acmeConfig(acme string) string {
	return "listeners:\n" +
		"  - name: web\n" +
		"    listen: ':8443'\n" +
		"    tls:\n" +
		acme +
		"    routes: [{upstream: u}]\n" +
		"  - name: plain\n" +
		"    listen: ':8080'\n" +
		"    routes: [{upstream: u}]\n" +
		"  - name: raw\n" +
		"    protocol: tcp\n" +
		"    listen: ':9000'\n" +
		"    upstream: u\n" +
		"upstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
}

func TestACMEIsParsedWithDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg := mustParse(t, acmeConfig("      acme:\n        hosts: [shop.example.com, www.example.com]\n        email: ops@example.com\n        storage: '"+dir+"/acme'\n        http_listener: plain\n"))
	a := cfg.Listeners[0].TLS.ACME
	if a == nil || len(a.Hosts) != 2 || a.Email != "ops@example.com" || a.Storage != dir+"/acme" || a.HTTPListener != "plain" {
		t.Fatalf("ACME = %+v, want the keys as written", a)
	}
	if a.Directory != DefaultACMEDirectory {
		t.Errorf("directory = %q, want the default %q", a.Directory, DefaultACMEDirectory)
	}
}

func TestACMEProblems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	st := "        storage: '" + dir + "/acme'\n"
	tests := []struct {
		name, acme string
		want       []string
	}{
		{"hosts and storage required", "      acme: {email: ops@example.com}\n", []string{
			`lb.yaml:5:13: tls.acme.hosts is required: the DNS names to get certificates for`,
			`lb.yaml:5:13: tls.acme.storage is required: the directory that keeps certificates and the account key across restarts`,
		}},
		{"bad hosts", "      acme:\n        hosts: ['*.example.com', 10.0.0.1, 'shop.example.com:443', localhost, 'bad_name.example.com', ok.example.com, OK.example.com]\n" + st, []string{
			`lb.yaml:6:17: tls.acme.hosts: "*.example.com" is a wildcard: wildcard certificates need the dns-01 challenge, which switchboard does not answer`,
			`lb.yaml:6:34: tls.acme.hosts: "10.0.0.1" is an IP address: ACME certificates here are for DNS names`,
			`lb.yaml:6:44: tls.acme.hosts: "shop.example.com:443" has a port: write the name alone`,
			`lb.yaml:6:68: tls.acme.hosts: "localhost" has a single label: a CA issues only for names under a public domain`,
			`lb.yaml:6:79: tls.acme.hosts: "bad_name.example.com" is not a valid DNS name`,
			`lb.yaml:6:119: tls.acme.hosts: "OK.example.com" is already in an acme block (line 6): one certificate per name`,
		}},
		{"bad email and directory", "      acme:\n        hosts: [a.example.com]\n        email: 'Ops <ops@example.com>'\n        directory: 'http://ca.example.com/dir'\n" + st, []string{
			`lb.yaml:7:16: tls.acme.email "Ops <ops@example.com>" is not an email address (write it bare: ops@example.com)`,
			`lb.yaml:8:20: tls.acme.directory "http://ca.example.com/dir" is not an https URL (the CA's directory, e.g. ` + DefaultACMEDirectory + `)`,
		}},
		{"ca_file", "      acme:\n        hosts: [a.example.com]\n        ca_file: '" + file + "'\n" + st, []string{
			`lb.yaml:7:18: tls.acme.ca_file "` + file + `" holds no PEM certificate`,
		}},
		{"storage is a file", "      acme:\n        hosts: [a.example.com]\n        storage: '" + file + "'\n", []string{
			`lb.yaml:7:18: tls.acme.storage "` + file + `": is not a directory`,
		}},
		{"storage under a file", "      acme:\n        hosts: [a.example.com]\n        storage: '" + file + "/acme'\n", []string{
			`lb.yaml:7:18: tls.acme.storage "` + file + `/acme": cannot be created: ` + file + ` is not a directory`,
		}},
		{"http_listener", "      acme:\n        hosts: [a.example.com]\n        http_listener: nope\n" + st, []string{
			`lb.yaml:7:24: tls.acme.http_listener "nope" names no listener`,
		}},
		{"http_listener is tcp", "      acme:\n        hosts: [a.example.com]\n        http_listener: raw\n" + st, []string{
			`lb.yaml:7:24: tls.acme.http_listener "raw" is a tcp listener: it must be a cleartext http listener (on port 80)`,
		}},
		{"http_listener is itself", "      acme:\n        hosts: [a.example.com]\n        http_listener: web\n" + st, []string{
			`lb.yaml:7:24: tls.acme.http_listener "web" is this TLS listener: name a cleartext listener (on port 80)`,
		}},
		{"files beside acme", "      cert_file: a.pem\n      key_file: a.key\n      acme: {hosts: [a.example.com], storage: '" + dir + "'}\n", []string{
			`lb.yaml:5:18: tls.cert_file and tls.acme are exclusive: acme obtains the listener's certificates`,
			`lb.yaml:6:17: tls.key_file and tls.acme are exclusive: acme obtains the listener's certificates`,
		}},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		tests = append(tests, struct {
			name, acme string
			want       []string
		}{"storage not writable", "      acme:\n        hosts: [a.example.com]\n        storage: '" + readOnly + "'\n", []string{
			`lb.yaml:7:18: tls.acme.storage "` + readOnly + `": is not writable: permission denied`,
		}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLines(t, problemLines(t, "lb.yaml", acmeConfig(tt.acme)), tt.want)
		})
	}
}
