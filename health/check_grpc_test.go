package health

import (
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// grpcHealthServer answers grpc.health.v1.Health/Check over h2c the way
// grpc-go's health server does: statuses by service name, NotFound for an
// unknown service.
func grpcHealthServer(t *testing.T, statuses map[string]uint64, authority chan<- string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.URL.Path != "/grpc.health.v1.Health/Check" || r.Header.Get("Content-Type") != "application/grpc" {
			http.Error(w, "not a gRPC health call", http.StatusBadRequest)
			return
		}
		if authority != nil {
			authority <- r.Host
		}
		body, _ := io.ReadAll(r.Body)
		service := ""
		if len(body) > 5+2 { // frame header, tag, length
			service = string(body[7:])
		}
		w.Header().Set("Content-Type", "application/grpc")
		status, ok := statuses[service]
		if !ok {
			// Trailers-only response.
			w.Header().Set("Grpc-Status", "5")
			w.Header().Set("Grpc-Message", "unknown%20service")
			return
		}
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		msg := binary.AppendUvarint([]byte{0x08}, status)
		w.Write(grpcFrame(msg))
		w.Header().Set("Grpc-Status", "0")
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestGRPCCheck(t *testing.T) {
	authority := make(chan string, 10)
	addr := grpcHealthServer(t, map[string]uint64{"": 1, "orders": 1, "billing": 2}, authority)
	tests := []struct {
		service string
		want    string // error substring, "" for pass
	}{
		{"", ""},
		{"orders", ""},
		{"billing", "serving status NOT_SERVING"},
		{"nope", "grpc status NotFound: unknown service"},
	}
	for _, tt := range tests {
		err := (&GRPCCheck{Service: tt.service, Authority: "orders.internal"}).Check(checkCtx(t), addr)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("service %q: %v, want pass", tt.service, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("service %q: error %v, want %q", tt.service, err, tt.want)
		}
		if got := <-authority; got != "orders.internal" {
			t.Errorf("service %q: :authority %q, want orders.internal", tt.service, got)
		}
	}
	if err := (&GRPCCheck{}).Check(checkCtx(t), closedAddr(t)); err == nil {
		t.Error("check of a closed port passed")
	}
}

func TestParseHealthCheckResponseSkipsUnknownFields(t *testing.T) {
	msg := []byte{0x12, 0x02, 'h', 'i'}              // field 2, bytes "hi"
	msg = binary.AppendUvarint(append(msg, 0x08), 2) // field 1 = NOT_SERVING
	msg = append(msg, 0x1d, 0, 0, 0, 0)              // field 3, fixed32
	if got, err := parseHealthCheckResponse(grpcFrame(msg)); err != nil || got != 2 {
		t.Errorf("status %d, %v; want 2", got, err)
	}
	if got, err := parseHealthCheckResponse(grpcFrame(nil)); err != nil || got != 0 {
		t.Errorf("empty message: status %d, %v; want 0 (UNKNOWN)", got, err)
	}
	if _, err := parseHealthCheckResponse([]byte{0, 0, 0, 0, 9, 0x08}); err == nil {
		t.Error("truncated frame accepted")
	}
}
