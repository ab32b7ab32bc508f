package health

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// tlsServer starts an HTTPS server with a certificate of ca for 127.0.0.1
// that answers "ok" and records whether the requests came over TLS.
func tlsServer(t *testing.T, ca *testutil.TestCA, sawTLS chan<- bool) string {
	t.Helper()
	cert, _, _ := ca.Issue(t, "checked", "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawTLS <- r.TLS != nil
		io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

func TestHTTPCheckOverTLS(t *testing.T) {
	ca, other := testutil.NewTestCA(t), testutil.NewTestCA(t)
	sawTLS := make(chan bool, 1)
	addr := tlsServer(t, ca, sawTLS)

	h := &HTTPCheck{Body: "ok", TLS: &tls.Config{RootCAs: ca.Pool}}
	if err := h.Check(checkCtx(t), addr); err != nil {
		t.Fatalf("check with the right CA: %v", err)
	}
	if !<-sawTLS {
		t.Fatal("the check's request did not come over TLS")
	}
	wrong := &HTTPCheck{TLS: &tls.Config{RootCAs: other.Pool}}
	if err := wrong.Check(checkCtx(t), addr); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("check with the wrong CA: %v; want a certificate error", err)
	}
	if err := (&HTTPCheck{}).Check(checkCtx(t), addr); err == nil || !strings.Contains(err.Error(), "status 400") {
		t.Fatalf("cleartext check of a TLS endpoint: %v; want status 400 (Go's answer to HTTP on a TLS port)", err)
	}
}

func TestTCPCheckWithTLSCompletesAHandshake(t *testing.T) {
	ca, other := testutil.NewTestCA(t), testutil.NewTestCA(t)
	addr := tlsServer(t, ca, make(chan bool, 1))
	if err := (TCPCheck{TLS: &tls.Config{RootCAs: ca.Pool}}).Check(checkCtx(t), addr); err != nil {
		t.Fatalf("handshake with the right CA: %v", err)
	}
	if err := (TCPCheck{TLS: &tls.Config{RootCAs: other.Pool}}).Check(checkCtx(t), addr); err == nil {
		t.Fatal("a TLS tcp check passed against a certificate its CA did not sign")
	}
	if err := (TCPCheck{}).Check(checkCtx(t), addr); err != nil {
		t.Fatalf("a plain tcp check of the same endpoint: %v", err)
	}
}

func TestGRPCCheckOverTLS(t *testing.T) {
	ca := testutil.NewTestCA(t)
	cert, _, _ := ca.Issue(t, "grpc", "127.0.0.1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	hs := grpchealth.NewServer()
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("billing", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	addr := ln.Addr().String()
	cfg := &tls.Config{RootCAs: ca.Pool}

	if err := (&GRPCCheck{Service: "orders", TLS: cfg}).Check(checkCtx(t), addr); err != nil {
		t.Fatalf("SERVING service over TLS: %v", err)
	}
	if err := (&GRPCCheck{Service: "billing", TLS: cfg}).Check(checkCtx(t), addr); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("NOT_SERVING service over TLS: %v", err)
	}
	if err := (&GRPCCheck{Service: "orders"}).Check(checkCtx(t), addr); err == nil {
		t.Fatal("an h2c check passed against a TLS-only gRPC server")
	}
}

func TestActiveConfigTLSReachesTheChecker(t *testing.T) {
	cfg := &tls.Config{ServerName: "orders.internal"}
	for _, typ := range []string{TypeHTTP, TypeTCP, TypeGRPC} {
		c, err := ActiveConfig{Type: typ, TLS: cfg}.NewChecker()
		if err != nil {
			t.Fatal(err)
		}
		var got *tls.Config
		switch c := c.(type) {
		case *HTTPCheck:
			got = c.TLS
		case TCPCheck:
			got = c.TLS
		case *GRPCCheck:
			got = c.TLS
		}
		if got != cfg {
			t.Errorf("%s checker has TLS %p; want the config's %p", typ, got, cfg)
		}
	}
}
