package httpproxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/upstream"
)

// statusTransport answers every attempt with its status (a fake for this
// unit test of the handler).
type statusTransport struct{ status int }

func (s *statusTransport) RoundTrip(context.Context, time.Time, *endpoint.Endpoint, *pipeline.Call, io.Reader) (*http.Response, error) {
	return &http.Response{StatusCode: s.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), ContentLength: 0}, nil
}

// TestAPanicWhileRelayingGivesTheConcurrencySlotBack: when writing the
// answer panics (here: a status net/http refuses to write), the request's
// concurrency slot and its endpoint pick must still be given back, or the
// route would answer 503 concurrency_limited forever after.
func TestAPanicWhileRelayingGivesTheConcurrencySlotBack(t *testing.T) {
	u, err := upstream.New("u", upstream.Config{Targets: []endpoint.Spec{{Address: "a:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	tr := &statusTransport{status: 42}
	p, err := pipeline.New("r", pipeline.Config{Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1}}, u, tr)
	if err != nil {
		t.Fatal(err)
	}
	lc := &config.Listener{Name: "web", Routes: []config.Route{{Name: "r", Upstream: "u"}}}
	h := &Handler{name: "web", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h.tbl.Store(NewTable(lc, func(string) *pipeline.Route { return p }, NewMetrics(prometheus.NewRegistry())))
	serve := func() (code int, panicked bool) {
		defer func() { panicked = recover() != nil }()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://web/", nil))
		return rec.Code, false
	}
	if _, panicked := serve(); !panicked {
		t.Fatal("writing status 42 did not panic; the test needs a relay that fails")
	}
	tr.status = 200
	if code, _ := serve(); code != 200 {
		t.Fatalf("after the panicked request: %d, want 200 (its concurrency slot given back)", code)
	}
	if n := u.Pool().Snapshot().All[0].InFlight(); n != 0 {
		t.Fatalf("the endpoint has %d picks in flight, want 0", n)
	}
}
