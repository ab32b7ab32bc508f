package upstream_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Balance real HTTP requests over two servers; the one that fails is
// ejected by passive health after two failures, and picks skip it.
func Example() {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer ok.Close()
	defer bad.Close()
	names := map[string]string{ok.Listener.Addr().String(): "ok", bad.Listener.Addr().String(): "bad"}
	up, err := upstream.New("orders", upstream.Config{
		Targets: []endpoint.Spec{{Address: ok.Listener.Addr().String()}, {Address: bad.Listener.Addr().String()}},
		Health:  upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 2}},
		Breaker: &breaker.Config{ConsecutiveFailures: 5}, // each endpoint's own breaker
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer up.Close()
	for i := 0; i < 6; i++ {
		pick, err := up.Pick(&balance.Info{})
		if err != nil {
			fmt.Println(err)
			return
		}
		t0 := time.Now()
		resp, err := http.Get("http://" + pick.Endpoint.Address() + "/")
		o := endpoint.Outcome{Err: err, Latency: time.Since(t0)}
		if err == nil {
			o.Status = resp.StatusCode
			resp.Body.Close()
		}
		pick.Done(o) // passive health, the breaker and in-flight counts hear of it
		fmt.Println(names[pick.Endpoint.Address()], o.Status)
	}
	fmt.Println("bad is", up.Pool().Snapshot().All[1].State())
	// Output:
	// ok 200
	// bad 503
	// ok 200
	// bad 503
	// ok 200
	// ok 200
	// bad is ejected
}
