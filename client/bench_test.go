package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// benchTransport is the transport every contender sends through: the
// same settings as the client's own.
func benchTransport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
}

// benchPolicies are the client's retry and breaker, as close as they go
// to failsafehttp's in BenchmarkRoundTrip.
var benchPolicies = pipeline.Config{
	Retry:   &retry.Policy{Attempts: 3},
	Breaker: &breaker.Config{WindowSize: 100, MinRequests: 100, FailureRate: 0.5},
}

func failsafeRoundTripper(inner http.RoundTripper) http.RoundTripper {
	rp := failsafehttp.NewRetryPolicyBuilder().WithMaxRetries(2).Build()
	cb := circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(func(r *http.Response, err error) bool { return err != nil || r.StatusCode >= 500 }).
		WithFailureThresholdRatio(50, 100).Build()
	return failsafehttp.NewRoundTripper(inner, rp, cb)
}

// run sends GETs to url through rt until b is done, reading each body to
// its end and closing it.
func run(b *testing.B, rt http.RoundTripper, url string) {
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("GET", url, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkRoundTrip compares, against the same loopback server, a bare
// http.Transport, the client over one like it (no policies; retry and
// breaker), and failsafehttp's RoundTripper with a retry policy and a
// breaker over one like it.
//
//	go test -run '^$' -bench 'RoundTrip|Overhead' -benchmem -count 5 ./client/
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	newClient := func(b *testing.B, pc pipeline.Config) *client.Client {
		c, err := client.New(client.WithTransport(benchTransport()), client.WithLogger(quiet()),
			client.WithService("orders", client.Service{Upstream: upstream.Config{Targets: []endpoint.Spec{{Address: addr}}}, Pipeline: pc}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c
	}
	b.Run("bare-transport", func(b *testing.B) { run(b, benchTransport(), srv.URL+"/") })
	b.Run("client", func(b *testing.B) { run(b, newClient(b, pipeline.Config{}), "http://orders/") })
	b.Run("client-retry-breaker", func(b *testing.B) { run(b, newClient(b, benchPolicies), "http://orders/") })
	b.Run("failsafehttp-retry-breaker", func(b *testing.B) { run(b, failsafeRoundTripper(benchTransport()), srv.URL+"/") })
}

// stubTransport answers every request at once, in memory: with it the
// benchmarks measure what a RoundTripper adds, without the network's
// noise.
type stubTransport struct{}

func (stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: req}, nil
}

// BenchmarkOverhead is BenchmarkRoundTrip over stubTransport: the cost of
// the client itself (and of failsafehttp) per request.
func BenchmarkOverhead(b *testing.B) {
	newClient := func(b *testing.B, pc pipeline.Config) *client.Client {
		c, err := client.New(client.WithTransport(stubTransport{}), client.WithLogger(quiet()),
			client.WithService("orders", client.Service{Upstream: upstream.Config{Targets: []endpoint.Spec{{Address: "127.0.0.1:1"}}}, Pipeline: pc}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c
	}
	b.Run("stub", func(b *testing.B) { run(b, stubTransport{}, "http://127.0.0.1:1/") })
	b.Run("client", func(b *testing.B) { run(b, newClient(b, pipeline.Config{}), "http://orders/") })
	b.Run("client-retry-breaker", func(b *testing.B) { run(b, newClient(b, benchPolicies), "http://orders/") })
	b.Run("failsafehttp-retry-breaker", func(b *testing.B) { run(b, failsafeRoundTripper(stubTransport{}), "http://127.0.0.1:1/") })
}
