package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// peekable is what the peek tests drive: a limiter and its PeekN.
type peekable interface {
	Limiter
	PeekN(now time.Time, n int) Result
}

// TestPeekNForetellsReserveNAndCountsNothing drives every algorithm
// through a random run of requests; before each one, PeekN is asked three
// times and must give exactly what the ReserveN that follows returns.
// Were a peek to count, the second and third peeks, or the reservation,
// would differ from the first.
func TestPeekNForetellsReserveNAndCountsNothing(t *testing.T) {
	limiters := map[string]func() peekable{
		"token_bucket":          func() peekable { return NewTokenBucket(Rate{N: 5, Per: time.Second}, 3) },
		"leaky_bucket":          func() peekable { return NewLeakyBucket(Rate{N: 5, Per: time.Second}, 3, 0) },
		"fixed_window":          func() peekable { return NewFixedWindow(Rate{N: 4, Per: time.Second}) },
		"sliding_window":        func() peekable { return NewSlidingWindow(Rate{N: 4, Per: time.Second}) },
		"sliding_window(log)":   func() peekable { return NewSlidingLog(Rate{N: 4, Per: time.Second}) },
		"leaky_bucket max_wait": func() peekable { return NewLeakyBucket(Rate{N: 5, Per: time.Second}, 4, 300*time.Millisecond) },
	}
	for name, mk := range limiters {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			l := mk()
			now := t0
			allowed, rejected := 0, 0
			for i := range 400 {
				now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
				n := rng.IntN(3) // 0, 1 or 2 events
				peek := l.PeekN(now, n)
				for j := range 2 {
					if again := l.PeekN(now, n); again != peek {
						t.Fatalf("step %d: peek %d differs from the first: %+v then %+v", i, j+2, peek, again)
					}
				}
				got := l.ReserveN(now, n)
				if got != peek {
					t.Fatalf("step %d at %v, n=%d: PeekN said %+v, ReserveN gave %+v", i, now.Sub(t0), n, peek, got)
				}
				if n > 0 {
					if got.Allowed {
						allowed++
					} else {
						rejected++
					}
				}
			}
			if allowed == 0 || rejected == 0 {
				t.Fatalf("the run admitted %d and rejected %d: it must try both outcomes", allowed, rejected)
			}
		})
	}
}

// TestKeyedPeekNCountsNothingAndAddsNoKey checks Keyed.PeekN for an
// inline bucket and a window algorithm: a burst of peeks leaves every
// token for the requests, and a key only peeked at is not remembered.
func TestKeyedPeekNCountsNothingAndAddsNoKey(t *testing.T) {
	for _, cfg := range []Config{
		{Algorithm: TokenBucketName, Rate: "1/m", Burst: 3, Key: "header:X-User"},
		{Algorithm: FixedWindowName, Rate: "3/m", Key: "header:X-User"},
		{Algorithm: SlidingWindowName, Rate: "3/m", Key: "header:X-User"},
		{Algorithm: LeakyBucketName, Rate: "1/m", Queue: 2, Key: "header:X-User"},
	} {
		t.Run(cfg.Algorithm, func(t *testing.T) {
			k, err := NewKeyed(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				if res := k.PeekN("alice", t0, 1); !res.Allowed {
					t.Fatalf("peek at a new key: %+v, want allowed", res)
				}
			}
			if n := k.Len(); n != 0 {
				t.Fatalf("after peeks only, Keyed holds %d keys, want 0", n)
			}
			for i := range 3 {
				peek := k.PeekN("alice", t0, 1)
				got := k.ReserveN("alice", t0, 1)
				if !got.Allowed || got != peek {
					t.Fatalf("request %d: peek %+v, reservation %+v; want both the same and allowed", i+1, peek, got)
				}
			}
			peek := k.PeekN("alice", t0, 1)
			if peek.Allowed {
				t.Fatalf("the fourth request is peeked as allowed: %+v", peek)
			}
			if got := k.ReserveN("alice", t0, 1); got != peek {
				t.Fatalf("fourth request: peek %+v, reservation %+v", peek, got)
			}
			if res := k.PeekN("bob", t0, 1); !res.Allowed || k.Len() != 1 {
				t.Fatalf("peek at another key: %+v with %d keys held; want allowed and 1 key", res, k.Len())
			}
		})
	}
}
