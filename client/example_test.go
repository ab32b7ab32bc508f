package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registryd"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// server starts a loopback server that answers with text.
func server(text string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, text) }))
}

func addr(s *httptest.Server) endpoint.Spec {
	return endpoint.Spec{Address: s.Listener.Addr().String()}
}

// Call a service by name over two static targets, one of them dead: the
// connect failure is tried again on the live one, and the caller sees no
// error.
func Example() {
	live := server("hello from orders")
	defer live.Close()
	dead := server("")
	dead.Close()

	c, err := client.New(client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: []endpoint.Spec{addr(dead), addr(live)}},
		Pipeline: pipeline.Config{Timeout: 5 * time.Second, Retry: &retry.Policy{Attempts: 2}},
	}))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	hc := c.HTTPClient()
	for i := 0; i < 3; i++ {
		resp, err := hc.Get("http://orders/hello")
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close() // finishes the call: its outcome is reported
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 hello from orders
	// 200 hello from orders
	// 200 hello from orders
}

// Discover a service in the embedded registry running in the same process
// (over HTTP, registry/consul pointed at it works the same way).
func ExampleWithRegistry() {
	reg, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	defer reg.Close()
	inst := server("an instance found in the registry")
	defer inst.Close()
	host, port, _ := net.SplitHostPort(inst.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	ctx := context.Background()
	reg.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "orders-1", Service: "orders", Address: host, Port: p}})

	c, err := client.New(
		client.WithRegistry("embedded", reg.Discoverer()),
		client.WithService("orders", client.Service{}), // no targets: discovered
	)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	// The first call waits for the registry's first answer.
	resp, err := c.HTTPClient().Get("http://orders/")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output:
	// an instance found in the registry
}

// A breaker that opens after two failures, and a static fallback step
// that answers in the service's place, marked degraded.
func ExampleDegraded() {
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer sick.Close()
	c, _ := client.New(client.WithService("prices", client.Service{
		Upstream: upstream.Config{Targets: []endpoint.Spec{addr(sick)}},
		Pipeline: pipeline.Config{
			Breaker:  &breaker.Config{ConsecutiveFailures: 2, OpenFor: time.Minute},
			Fallback: &fallback.Config{Steps: []fallback.StepConfig{{Type: fallback.StepStatic, Status: 200, Body: "1.00"}}},
		},
	}))
	defer c.Close()
	for i := 0; i < 3; i++ {
		resp, err := c.HTTPClient().Get("http://prices/eur")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		reason, degraded := client.Degraded(resp)
		if degraded {
			fmt.Printf("%d %q degraded: %s\n", resp.StatusCode, body, reason)
		} else {
			fmt.Printf("%d %q\n", resp.StatusCode, body)
		}
	}
	// Output:
	// 500 ""
	// 500 ""
	// 200 "1.00" degraded: static: breaker_open
}

// Send every call for one user to the same instance.
func ExampleWithHashKey() {
	var targets []endpoint.Spec
	for _, name := range []string{"a", "b", "c"} {
		s := server(name)
		defer s.Close()
		targets = append(targets, addr(s))
	}
	c, _ := client.New(client.WithService("profiles", client.Service{Upstream: upstream.Config{
		Targets: targets,
		Balance: balance.Config{Policy: "consistent_hash", HashKey: "header:X-User-Id"},
	}}))
	defer c.Close()
	instance := func(user string) string {
		req, _ := http.NewRequestWithContext(client.WithHashKey(context.Background(), user), "GET", "http://profiles/me", nil)
		resp, err := c.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := instance("user-42")
	same := true
	for i := 0; i < 10; i++ {
		same = same && instance("user-42") == first
	}
	fmt.Println("user-42 always on one instance:", same)
	// Output:
	// user-42 always on one instance: true
}

// Read the proxy's upstreams and routes from YAML.
func ExampleParseConfig() {
	orders := server("ok")
	defer orders.Close()
	cfg, err := client.ParseConfig([]byte(`
upstreams:
  orders:
    balance: {policy: least_conn}
    targets: [{address: "`+orders.Listener.Addr().String()+`"}]
routes:
  - match: {path_prefix: /api, methods: [GET]}
    upstream: orders
    retry: {attempts: 3, per_try_timeout: 500ms}
`), "client.yaml")
	if err != nil {
		panic(err)
	}
	c, err := client.New(client.WithConfig(cfg))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	resp, err := c.HTTPClient().Get("http://orders/api/list")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(cfg.Routes[0].Name, resp.StatusCode)

	_, err = client.ParseConfig([]byte("upstreams:\n  orders:\n    targets: [{address: 127.0.0.1:1}]\n    balance: {policy: fastest}\n"), "bad.yaml")
	fmt.Println(err)
	// Output:
	// client/0 200
	// bad.yaml:4:23: policy: "fastest" is unknown (known: consistent_hash, dynamic_weight, least_conn, maglev, p2c, p2c_ewma, random, round_robin, weighted_random, weighted_round_robin)
}

// A call that gets no response fails with a *pipeline.Error: the status
// the proxy would answer, a stable code, and when to come back.
func ExampleClient_RoundTrip_errors() {
	orders := server("ok")
	defer orders.Close()
	c, _ := client.New(client.WithService("orders", client.Service{
		Upstream: upstream.Config{Targets: []endpoint.Spec{addr(orders)}},
		Pipeline: pipeline.Config{RateLimit: []pipeline.RateLimit{{Name: "per-minute", Config: ratelimit.Config{Rate: "1/m", Burst: 1}}}},
	}))
	defer c.Close()
	for i := 0; i < 2; i++ {
		resp, err := c.HTTPClient().Get("http://orders/")
		var pe *pipeline.Error
		switch {
		case errors.As(err, &pe):
			fmt.Println(pe.Status, pe.Code, "retry after", pe.RetryAfter.Round(time.Minute))
		case err != nil:
			fmt.Println("error:", err)
		default:
			resp.Body.Close()
			fmt.Println(resp.StatusCode)
		}
	}
	_, err := c.HTTPClient().Get("http://billing/")
	var ue *client.UnknownServiceError
	fmt.Println(errors.As(err, &ue), ue.Host)
	// Output:
	// 200
	// 429 rate_limited retry after 1m0s
	// true billing
}
