package config

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func writeKeyPair(t *testing.T, dir, name string) (certFile, keyFile string) {
	return testutil.WriteKeyPair(t, dir, name)
}

func tlsConfig(tls string) string {
	return "listeners:\n  - name: web\n    listen: ':8443'\n    tls: " + tls + "\n    routes: [{upstream: u}]\nupstreams:\n  u: {targets: [{address: 'a:1'}]}\n"
}

func TestTLSKeyPairIsLoaded(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeKeyPair(t, dir, "a")
	cfg := mustParse(t, tlsConfig("{cert_file: '"+cert+"', key_file: '"+key+"'}"))
	if got := cfg.Listeners[0].TLS; got == nil || got.CertFile != cert || got.KeyFile != key {
		t.Errorf("TLS = %+v, want the files as written", got)
	}
}

func TestTLSProblems(t *testing.T) {
	dir := t.TempDir()
	certA, _ := writeKeyPair(t, dir, "a")
	_, keyB := writeKeyPair(t, dir, "b")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tls string
		want      []string
	}{
		{"both required", "{}", []string{
			`lb.yaml:4:10: tls.cert_file is required`,
			`lb.yaml:4:10: tls.key_file is required`,
		}},
		{"key required", "{cert_file: '" + certA + "'}", []string{
			`lb.yaml:4:10: tls.key_file is required`,
		}},
		{"missing file", "{cert_file: '" + certA + "', key_file: '" + dir + "/nope.key'}", []string{
			`lb.yaml:4:` + col(certA, 36) + `: tls.key_file "` + dir + `/nope.key": no such file or directory`,
		}},
		{"directory", "{cert_file: '" + dir + "', key_file: '" + keyB + "'}", []string{
			`lb.yaml:4:22: tls.cert_file "` + dir + `": not a regular file`,
		}},
		{"mismatched pair", "{cert_file: '" + certA + "', key_file: '" + keyB + "'}", []string{
			`lb.yaml:4:22: tls.cert_file "` + certA + `" and tls.key_file "` + keyB + `" are not a usable key pair: tls: private key does not match public key`,
		}},
		{"not PEM", "{cert_file: '" + garbage + "', key_file: '" + keyB + "'}", []string{
			`lb.yaml:4:22: tls.cert_file "` + garbage + `" and tls.key_file "` + keyB + `" are not a usable key pair: tls: failed to find any PEM data in certificate input`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLines(t, problemLines(t, "lb.yaml", tlsConfig(tt.tls)), tt.want)
		})
	}
}

// col is the column of key_file's value in a tls line whose cert_file is
// certFile: offset plus the path's length.
func col(certFile string, offset int) string {
	return strconv.Itoa(offset + len(certFile))
}
