package consul

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/registry"
)

func TestTLSWithACAFile(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-Index", "5")
		w.Write([]byte(`[{"Node":{"Node":"n","Address":"10.0.0.1"},"Service":{"ID":"web-1","Service":"web","Port":80},"Checks":[]}]`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's handshake failure is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	q := registry.Query{Service: "web"}

	r := newTestRegistry(t, srv.URL, func(c *Config) { c.TLS = &TLS{CAFile: ca} })
	insts, err := r.Instances(nextCtx(t), q)
	if err != nil || len(insts) != 1 || insts[0].ID != "web-1" {
		t.Fatalf("Instances over TLS with the CA: %+v, %v", insts, err)
	}

	// Without the CA the server is not trusted.
	r = newTestRegistry(t, srv.URL, nil)
	if _, err := r.Instances(nextCtx(t), q); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Instances over TLS without the CA: %v, want a certificate error", err)
	}
}
