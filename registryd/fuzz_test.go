package registryd

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// FuzzRegister feeds arbitrary bodies to PUT /v1/agent/service/register.
// Whatever the body, the handler must not panic, and either answer 200 with
// exactly one service stored, or refuse it with the registry unchanged (no
// service, no check, same index).
func FuzzRegister(f *testing.F) {
	for _, seed := range []string{
		goodReg,
		`{"Name":"a"}`,
		`{"name":"py","id":"py-1","port":5000,"check":{"ttl":"10s"}}`,
		`{"Name":"w","Checks":[{"HTTP":"http://127.0.0.1:1/h","Interval":"1s","Header":{"A":["b"]}},{"TCP":"127.0.0.1:1","Interval":"1s"}]}`,
		`{"Name":"a","Port":70000}`,
		`{"Name":"a","Check":{"TTL":"5x"}}`,
		`{"Name":"a","Meta":{"k":"v"},"Weights":{"Passing":2,"Warning":1},"Tags":["x","y"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := newServer(Config{Listen: DefaultListen, Logger: quietLogger, NodeName: "fuzz", MaxBodyBytes: DefaultMaxBodyBytes}, clock.Real)
		s.noProbes = true
		defer s.Close()
		before := currentIndex(s)
		req := httptest.NewRequest(http.MethodPut, "/v1/agent/service/register", bytes.NewReader(body))
		req.Host = DefaultListen // httptest's example.com would be refused (DNS rebinding rule)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		s.mu.RLock()
		services, checks, names, index := len(s.services), len(s.checks), len(s.names), s.index
		s.mu.RUnlock()
		switch rec.Code {
		case http.StatusOK:
			if services != 1 || names != 1 {
				t.Fatalf("200 but %d services under %d names stored for %q", services, names, body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if services != 0 || checks != 0 || names != 0 || index != before {
				t.Fatalf("refused (%d %s) but state changed: %d services, %d checks, index %d->%d", rec.Code, rec.Body, services, checks, before, index)
			}
			if rec.Body.Len() == 0 {
				t.Fatalf("refusal %d without a message for %q", rec.Code, body)
			}
		default:
			t.Fatalf("unexpected status %d (%s) for %q", rec.Code, rec.Body, body)
		}
	})
}
