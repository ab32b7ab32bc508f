package breaker

import (
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// TestBreakerPeekForetellsAllowAndTakesNoProbe follows a breaker from
// closed to open to half-open: at every step Peek says what Allow then
// does, and however often it is asked, the half-open breaker still has
// all its probe slots for real calls.
func TestBreakerPeekForetellsAllowAndTakesNoProbe(t *testing.T) {
	b, err := New(Config{WindowSize: 1, MinRequests: 1, OpenFor: time.Second, HalfOpenProbes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, _ := b.Peek(t0); s != Closed || !ok {
		t.Fatalf("new breaker: Peek = %v, %v; want closed, allowed", s, ok)
	}
	tk, _ := b.Allow(t0)
	tk.Done(endpoint.Outcome{Err: errBoom}, t0)
	s, ok, in := b.Peek(t0.Add(300 * time.Millisecond))
	if s != Open || ok || in != 700*time.Millisecond {
		t.Fatalf("open breaker 300ms in: Peek = %v, %v, %v; want open, refused, 700ms", s, ok, in)
	}
	if _, err := b.Allow(t0.Add(300 * time.Millisecond)); err != ErrOpen {
		t.Fatalf("Allow after Peek said refused: %v, want ErrOpen", err)
	}
	later := t0.Add(time.Second)
	for range 10 {
		if s, ok, _ := b.Peek(later); s != HalfOpen || !ok {
			t.Fatalf("open period over: Peek = %v, %v; want half-open, allowed", s, ok)
		}
	}
	for i := range 2 {
		if _, err := b.Allow(later); err != nil {
			t.Fatalf("probe %d refused after peeks: %v (a peek took a probe slot)", i+1, err)
		}
		if s, ok, _ := b.Peek(later); s != HalfOpen || ok != (i == 0) {
			t.Fatalf("after probe %d: Peek = %v, %v; want half-open, allowed=%v", i+1, s, ok, i == 0)
		}
	}
	if _, err := b.Allow(later); err != ErrOpen {
		t.Fatalf("third call while both probes run: %v, want ErrOpen", err)
	}
}
