package pipeline_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestExplainSaysWhatTheLimitsWouldDoAndCountsNothing: a leaky bucket's
// wait, a full concurrency limit and the first refusing protection, with
// the real calls deciding exactly as explained.
func TestExplainSaysWhatTheLimitsWouldDoAndCountsNothing(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	entered := make(chan struct{}, 1)
	r := newRoute(t, pipeline.Config{
		RateLimit: []pipeline.RateLimit{
			{Name: "smooth", Config: ratelimit.Config{Algorithm: "leaky_bucket", Rate: "1/m", Queue: 2, Key: "path"}},
		},
		Concurrency: &ratelimit.ConcurrencyConfig{MaxInFlight: 1},
	}, u, fakeTransport{"a:1": func(ctx context.Context) (*http.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	req, _ := http.NewRequest("GET", "http://app/x", nil)
	now := time.Now()
	for range 10 {
		d := r.Explain(req, now)
		l := d.RateLimits[0]
		if !l.Allowed || l.Delay != "" || l.Key != "path" || l.KeyValue != "/x" || d.Refused != "" || d.Concurrency[0].Would != "admit" {
			t.Fatalf("before any request: %+v", d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := &pipeline.Call{Req: req.WithContext(ctx)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := r.Do(held, now)
		var pe *pipeline.Error
		errors.As(err, &pe)
		held.Finish(pe.Status, nil)
	}()
	<-entered
	d := r.Explain(req, now)
	if l := d.RateLimits[0]; !l.Allowed || l.Delay != "1m0s" || l.Remaining != 1 {
		t.Errorf("after one request through the leaky bucket: %+v, want allowed after a wait of 1m0s", l)
	}
	c := d.Concurrency[0]
	if c.Scope != "route" || c.InFlight != 1 || c.MaxInFlight != 1 || c.Queue != 0 || c.Would != "refuse" || d.Refused != "route concurrency limit" {
		t.Errorf("with the one slot held: %+v, refused %q; want route 1 of 1, refuse", c, d.Refused)
	}
	cancel()
	<-done
}
