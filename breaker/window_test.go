package breaker

import "testing"

// A success into a full window of successes is skipped (it would change
// nothing), and skipping it does not change when a later failure leaves
// the window: after exactly window_size more calls.
func TestCountWindowSkipsSuccessesIntoAWindowOfSuccesses(t *testing.T) {
	w := newCountWindow(4)
	for range 4 {
		w.record(0)
	}
	for range 100 {
		if _, changed := w.record(0); changed {
			t.Fatal("a success into a full window of successes reported a change")
		}
	}
	if n := w.seq.Load(); n != 4 {
		t.Fatalf("after 4 calls and 100 skipped successes: seq %d, want 4 (nothing written)", n)
	}
	if c, _ := w.record(flagFailed); c != (counts{total: 4, failures: 1}) {
		t.Fatalf("a failure after the skipped successes: %+v, want 1 failure of 4", c)
	}
	for i := range 3 {
		w.record(0)
		if f := uint32(w.bad.Load()); f != 1 {
			t.Fatalf("success %d after the failure: %d failures in the window, want the failure still in it", i+1, f)
		}
	}
	if c, _ := w.record(0); c != (counts{total: 4}) {
		t.Fatalf("the 4th success after the failure: %+v, want it gone", c)
	}
	if _, changed := w.record(0); changed {
		t.Fatal("a success into the window of successes again reported a change")
	}
}
