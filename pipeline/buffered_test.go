package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// heldBody is a pipeline.BufferedBody over bytes.
type heldBody struct {
	*bytes.Reader
	b []byte
}

func (h heldBody) NewReader() io.Reader { return bytes.NewReader(h.b) }

// bodyRecorder answers with each endpoint's status after reading the
// attempt's whole body, and records what it read.
type bodyRecorder struct {
	mu     sync.Mutex
	got    []string
	answer map[string]func() (*http.Response, error)
}

func (b *bodyRecorder) RoundTrip(_ context.Context, _ time.Time, ep *endpoint.Endpoint, _ *pipeline.Call, body io.Reader) (*http.Response, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.got = append(b.got, ep.Address()+":"+string(data))
	b.mu.Unlock()
	return b.answer[ep.Address()]()
}

func status(code int) func() (*http.Response, error) {
	return func() (*http.Response, error) {
		return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	}
}

// TestABufferedBodyIsSentWholeByEveryRetry: a body held whole is
// replayable whatever the retry policy's body_limit, and without a policy
// an idempotent request with one is retried like a request without a body.
func TestABufferedBodyIsSentWholeByEveryRetry(t *testing.T) {
	payload := strings.Repeat("0123456789", 100) // 1000 bytes, over body_limit
	for _, tc := range []struct {
		name string
		cfg  pipeline.Config
		a    func() (*http.Response, error)
	}{
		{"status retried under a policy", pipeline.Config{Retry: &retry.Policy{Attempts: 2, BodyLimit: 10, Statuses: []int{503}}}, status(503)},
		{"broken exchange retried without a policy", pipeline.Config{}, func() (*http.Response, error) { return nil, io.ErrUnexpectedEOF }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, upstream.Config{}, "a:1", "b:1")
			// The endpoint tried first fails as tc says; the other answers.
			rec := &bodyRecorder{answer: map[string]func() (*http.Response, error){}}
			first := ""
			for _, addr := range []string{"a:1", "b:1"} {
				rec.answer[addr] = func() (*http.Response, error) {
					if first == "" {
						first = addr
						return tc.a()
					}
					return status(200)()
				}
			}
			r := newRoute(t, tc.cfg, u, rec)
			req, _ := http.NewRequest("PUT", "http://app/x", nil)
			req.ContentLength = int64(len(payload))
			c := &pipeline.Call{Req: req, Body: heldBody{bytes.NewReader([]byte(payload)), []byte(payload)}}
			resp, err := r.Do(c, time.Now())
			if err != nil {
				t.Fatalf("Do: %v; want the retry to answer", err)
			}
			resp.Body.Close()
			c.Finish(resp.StatusCode, nil)
			if len(rec.got) != 2 {
				t.Fatalf("%d attempts, want 2", len(rec.got))
			}
			for i, g := range rec.got {
				if _, body, _ := strings.Cut(g, ":1:"); body != payload {
					t.Errorf("attempt %d sent %d bytes, want the whole %d", i, len(body), len(payload))
				}
			}
		})
	}
}

// A body read that timed out is the caller's stall: 408 request_timeout,
// and not the endpoint's fault.
func TestABodyReadTimeoutIs408(t *testing.T) {
	u := newUpstream(t, upstream.Config{}, "a:1")
	tr := fakeTransport{"a:1": func(context.Context) (*http.Response, error) {
		return nil, errors.Join(pipeline.ErrRequestBody, os.ErrDeadlineExceeded)
	}}
	r := newRoute(t, pipeline.Config{}, u, tr)
	req, _ := http.NewRequest("POST", "http://app/x", nil)
	c := &pipeline.Call{Req: req, Body: strings.NewReader("x")}
	_, err := r.Do(c, time.Now())
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusRequestTimeout || pe.Code != pipeline.CodeRequestTimeout {
		t.Fatalf("Do = %v, want 408 %s", err, pipeline.CodeRequestTimeout)
	}
	c.Finish(pe.Status, nil)
	if ep := u.Pool().Snapshot().All[0]; ep.Failures() != 0 {
		t.Fatalf("the endpoint was charged %d failures for the caller's stall", ep.Failures())
	}
}
