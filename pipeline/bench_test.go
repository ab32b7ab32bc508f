package pipeline_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// benchTransport answers every attempt at once with one shared response
// (refusing the endpoints in refuse), allocating nothing: the benchmark
// measures the attempt loop alone.
type benchTransport struct {
	resp   *http.Response
	refuse string
}

func (b *benchTransport) RoundTrip(_ context.Context, _ time.Time, ep *endpoint.Endpoint, _ *pipeline.Call, _ io.Reader) (*http.Response, error) {
	if ep.Address() == b.refuse {
		return nil, errRefused
	}
	return b.resp, nil
}

// BenchmarkDo measures one call through Route.Do and Finish, over a
// transport that answers in memory: bare (no limits, no policy), with
// every protection of a busy route (a rate limit, a concurrency limit, the
// breaker, a retry policy), and with a failed connect retried on the
// other endpoint.
//
//	go test -run '^$' -bench Do -benchmem -count 10 ./pipeline/
func BenchmarkDo(b *testing.B) {
	guarded := pipeline.Config{
		Timeout:     time.Minute,
		RateLimit:   []pipeline.RateLimit{{Name: "all", Config: ratelimit.Config{Rate: "1000000000/s", Burst: 1 << 30}}},
		Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1 << 20},
		Breaker:     &breaker.Config{WindowSize: 100, MinRequests: 100, FailureRate: 0.5},
		Retry:       &retry.Policy{Attempts: 3, BackoffBase: time.Nanosecond, BackoffMax: time.Nanosecond},
	}
	for _, bc := range []struct {
		name   string
		cfg    pipeline.Config
		refuse string
	}{
		{"bare", pipeline.Config{}, ""},
		{"guarded", guarded, ""},
		{"connect-retry", pipeline.Config{}, "a:1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			u := newUpstream(b, upstream.Config{}, "a:1", "b:1")
			tr := &benchTransport{resp: &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, refuse: bc.refuse}
			r := newRoute(b, bc.cfg, u, tr)
			req, _ := http.NewRequest("GET", "http://app/", nil)
			c := &pipeline.Call{Req: req}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := r.Do(c, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				c.Finish(resp.StatusCode, nil)
			}
		})
	}
}
