package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestSetHeaders(t *testing.T) {
	h := http.Header{}
	Result{Allowed: true, Limit: 40, Remaining: 7, ResetAfter: 2500 * ms}.SetHeaders(h)
	want := http.Header{"Ratelimit-Limit": {"40"}, "Ratelimit-Remaining": {"7"}, "Ratelimit-Reset": {"3"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("allowed: %v, want %v", h, want)
	}
	h = http.Header{}
	Result{Limit: 40, Remaining: 0, ResetAfter: 10 * time.Second, RetryAfter: 200 * ms}.SetHeaders(h)
	want = http.Header{"Ratelimit-Limit": {"40"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"10"}, "Retry-After": {"1"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("rejected: %v, want %v", h, want)
	}
	if h.Get("RateLimit-Limit") != "40" {
		t.Error("RateLimit-Limit is not found under its usual spelling")
	}
}

func TestWaitSleepsForTheLeakyBucketsDelay(t *testing.T) {
	b := NewLeakyBucket(Rate{N: 50, Per: time.Second}, 1, 0) // a slot every 20ms
	ctx := context.Background()
	if res, err := Wait(ctx, b, 1); err != nil || res.Delay != 0 {
		t.Fatalf("first Wait: %+v, %v; want no delay", res, err)
	}
	start := time.Now()
	res, err := Wait(ctx, b, 1)
	if err != nil || res.Delay <= 0 {
		t.Fatalf("second Wait: %+v, %v; want a delay", res, err)
	}
	if waited := time.Since(start); waited < res.Delay {
		t.Fatalf("Wait returned after %v, before the delay %v", waited, res.Delay)
	}
	// With the slot and the queue (1) taken, Wait is rejected at once.
	b = NewLeakyBucket(Rate{N: 1, Per: time.Hour}, 1, 0)
	b.ReserveN(time.Now(), 2)
	if res, err := Wait(ctx, b, 1); !errors.Is(err, ErrLimited) || res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("Wait on a full queue: %+v, %v; want ErrLimited with a RetryAfter", res, err)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a canceled context: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0): %v", err)
	}
}
