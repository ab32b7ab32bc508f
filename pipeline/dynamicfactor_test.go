package pipeline_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestDynamicWeightFollowsACustomFactorOverHTTP: two real backends report
// a custom factor in X-Switchboard-Load, one a full queue
// (queue_depth=100 of max 100), the other an empty one; with the factor
// weighing 9 against the built-in terms' 1 (idle cpu, mem, latency and
// errors), the full one scores (1+0)/10 = 0.1 against 1 and gets about 9%
// of the requests once its report is in. The load header is not relayed
// to the caller.
func TestDynamicWeightFollowsACustomFactorOverHTTP(t *testing.T) {
	backend := func(report string) (*httptest.Server, chan struct{}) {
		hits := make(chan struct{}, 4096)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Switchboard-Load", report)
			hits <- struct{}{}
		}))
		t.Cleanup(srv.Close)
		return srv, hits
	}
	full, fullHits := backend("cpu=0, queue_depth=100")
	empty, emptyHits := backend("cpu=0, queue_depth=0, unrelated=7")

	u, err := upstream.New("work", upstream.Config{
		Balance: balance.Config{Policy: balance.DynamicWeightName, DynamicWeight: balance.DynamicWeightConfig{
			Refresh: time.Millisecond,
			Factors: map[string]balance.DynamicFactor{"queue_depth": {Coefficient: 9, Max: 100}},
		}},
		Targets: []endpoint.Spec{{Address: full.Listener.Addr().String()}, {Address: empty.Listener.Addr().String()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	r := newRoute(t, pipeline.Config{}, u, pipeline.HTTPTransport{})

	send := func() {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://work/job", nil)
		c := &pipeline.Call{Req: req}
		resp, err := r.Do(c, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if h := resp.Header.Get("X-Switchboard-Load"); h != "" {
			t.Fatalf("the load report %q reached the caller", h)
		}
		c.Finish(resp.StatusCode, nil)
	}
	// Until both have reported once, the draw is even.
	for len(fullHits) == 0 || len(emptyHits) == 0 {
		send()
	}
	for len(fullHits) > 0 {
		<-fullHits
	}
	for len(emptyHits) > 0 {
		<-emptyHits
	}
	const n = 1000
	for range n {
		send()
	}
	share := float64(len(fullHits)) / n
	if len(fullHits)+len(emptyHits) != n {
		t.Fatalf("backends saw %d requests, want %d", len(fullHits)+len(emptyHits), n)
	}
	// Expected 0.1/1.1 = 9.1%; the first request or two before the
	// weight table's refresh are drawn evenly.
	if share > 0.2 {
		t.Fatalf("the backend with a full queue got %.1f%% of the requests, want about 9%%", 100*share)
	}
	if share == 0 {
		t.Fatalf("the backend with a full queue got nothing; min_weight keeps a trickle")
	}
}
