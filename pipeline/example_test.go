package pipeline_test

import (
	"errors"
	"fmt"
	"io"
	"net"
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

// Drive a call step by step, as an event loop does: the front end sends
// each attempt itself (here a stand-in that refuses on the first endpoint
// and answers on the second), arms a timer for each wait, and would run a
// blocking step on a goroutine of its own.
func ExampleRoute_Begin() {
	up, _ := upstream.New("orders", upstream.Config{Targets: []endpoint.Spec{{Address: "10.0.0.1:80"}, {Address: "10.0.0.2:80"}}})
	defer up.Close()
	route, _ := pipeline.New("orders", pipeline.Config{
		Retry: &retry.Policy{Attempts: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond},
	}, up, pipeline.HTTPTransport{}) // the Transport serves only blocking steps (hedges)
	send := func(ep *endpoint.Endpoint) (*http.Response, error) {
		if ep.Address() == "10.0.0.1:80" {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	}

	req, _ := http.NewRequest("GET", "http://orders/list", nil)
	c := &pipeline.Call{Req: req}
	for s := route.Begin(c, time.Now()); ; {
		fmt.Println(s)
		switch s {
		case pipeline.StepSend:
			ep, _, _ := c.Attempt()
			resp, err := send(ep)
			s = c.Answered(resp, err, time.Now())
			continue
		case pipeline.StepWait:
			time.Sleep(time.Until(c.WaitUntil())) // an event loop arms a timer instead
			s = c.Resume(time.Now())
			continue
		case pipeline.StepBlock:
			s = c.Block() // an event loop runs this on a goroutine
			continue
		}
		resp, err := c.Result()
		if err != nil {
			fmt.Println("error:", err)
			c.Finish(err.(*pipeline.Error).Status, nil)
			return
		}
		fmt.Println(resp.StatusCode)
		c.Finish(resp.StatusCode, nil)
		return
	}
	// Output:
	// send
	// wait
	// send
	// done
	// 200
}
