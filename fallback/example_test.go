package fallback_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/fallback"
)

func ExampleChain() {
	chain, err := fallback.New(fallback.Config{
		On: []string{"breaker_open", "status:503"},
		Steps: []fallback.StepConfig{
			{Type: fallback.StepStale, MaxAge: time.Minute},
			{Type: fallback.StepStatic, Status: 503, Body: "try again soon"},
		},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	req, _ := http.NewRequest(http.MethodGet, "http://shop/catalog", nil)
	key := req.URL.String()

	// Nothing stored yet: the static step answers.
	resp, step, _ := chain.Serve(context.Background(), req, key, fallback.BreakerOpen.String(), now)
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(step, resp.StatusCode, string(b), "|", resp.Header.Get(fallback.HeaderDegraded))

	// A good response was recorded; 10s later the upstream answers 503.
	chain.Store(key, 200, nil, []byte("catalog v1"), now)
	resp, step, _ = chain.Serve(context.Background(), req, key, fallback.StatusReason(503), now.Add(10*time.Second))
	b, _ = io.ReadAll(resp.Body)
	fmt.Println(step, resp.StatusCode, string(b), "|", resp.Header.Get(fallback.HeaderDegraded))
	// Output:
	// static 503 try again soon | static: breaker_open
	// stale 200 catalog v1 | stale: status:503
}

func ExampleFirst() {
	v, step, err := fallback.First(context.Background(),
		fallback.Step[string]{Name: "primary", Run: func(context.Context) (string, error) {
			return "", fmt.Errorf("connection refused")
		}},
		fallback.Step[string]{Name: "default", Run: func(context.Context) (string, error) {
			return "default settings", nil
		}},
	)
	fmt.Println(v, step, err)
	// Output: default settings default <nil>
}
