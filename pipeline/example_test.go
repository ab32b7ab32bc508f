package pipeline_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Balance real HTTP requests over two servers with passive health, a
// breaker and retries: the same governance as the proxy, in process.
func Example() {
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "a") }))
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer a.Close()
	defer b.Close()
	up, _ := upstream.New("orders", upstream.Config{
		Targets: []endpoint.Spec{{Address: a.Listener.Addr().String()}, {Address: b.Listener.Addr().String()}},
		Health:  upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 2}},
	})
	defer up.Close()
	route, _ := pipeline.New("orders", pipeline.Config{
		Timeout: 5 * time.Second,
		Retry:   &retry.Policy{Attempts: 2, Statuses: []int{503}},
		Breaker: &breaker.Config{ConsecutiveFailures: 5},
	}, up, pipeline.HTTPTransport{})
	for i := 0; i < 4; i++ {
		req, _ := http.NewRequest("GET", "http://orders/list", nil)
		c := &pipeline.Call{Req: req}
		resp, err := route.Do(c, time.Now())
		if err != nil {
			fmt.Println("error:", err)
			c.Finish(err.(*pipeline.Error).Status, nil)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Finish(resp.StatusCode, err)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 a
	// 200 a
	// 200 a
	// 200 a
}
