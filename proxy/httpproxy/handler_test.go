package httpproxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
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

// TestRequestStateLendsItsBodyToOneExchangeOnly: the response body kept
// in a request's state goes to the first exchange that asks, and to no
// other, even when a hedge asks at the same time: two exchanges sharing it
// would overwrite each other's response.
func TestRequestStateLendsItsBodyToOneExchangeOnly(t *testing.T) {
	st := new(reqState)
	got := make([]*h1.Body, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = st.takeBody()
		}()
	}
	wg.Wait()
	n := 0
	for _, b := range got {
		switch b {
		case nil:
		case &st.body:
			n++
		default:
			t.Fatalf("takeBody returned %p, not the state's body %p", b, &st.body)
		}
	}
	if n != 1 {
		t.Fatalf("the state's body went to %d exchanges, want 1", n)
	}
	if b := st.takeBody(); b != nil {
		t.Fatalf("takeBody after the first: %p, want nil", b)
	}
}

// TestMadeRequestIDIsBackedByTheRequestsState: a request id the proxy
// makes is 32 hex digits held in the request's own state (no string of
// its own), and two requests get different ids.
func TestMadeRequestIDIsBackedByTheRequestsState(t *testing.T) {
	var a, b reqState
	r1 := httptest.NewRequest(http.MethodGet, "http://a/", nil)
	r2 := httptest.NewRequest(http.MethodGet, "http://a/", nil)
	a.requestID(r1.Header, http.Header{}, nil)
	b.requestID(r2.Header, http.Header{}, nil)
	id1, id2 := r1.Header.Get("X-Request-Id"), r2.Header.Get("X-Request-Id")
	if len(id1) != 32 || strings.Trim(id1, "0123456789abcdef") != "" {
		t.Fatalf("made request id %q, want 32 hex digits", id1)
	}
	if id1 == id2 {
		t.Fatalf("two requests got the same id %q", id1)
	}
	if unsafe.StringData(id1) != &a.id[0] {
		t.Fatalf("request id %q is not backed by the request's state", id1)
	}
}
