package evloop

import "testing"

// TestFreeTakesTheLastKeptUpToMax: Take returns the last item kept, none
// once all are taken, and Keep keeps at most max.
func TestFreeTakesTheLastKeptUpToMax(t *testing.T) {
	var f Free[*int]
	if _, ok := f.Take(); ok {
		t.Fatal("a new Free gave an item")
	}
	a, b, c := new(int), new(int), new(int)
	if !f.Keep(a, 2) || !f.Keep(b, 2) || f.Keep(c, 2) {
		t.Fatalf("kept %d of three with max 2, want the first two", len(f.Kept()))
	}
	if v, ok := f.Take(); !ok || v != b {
		t.Fatal("Take did not return the last item kept")
	}
	if v, ok := f.Take(); !ok || v != a {
		t.Fatal("Take did not return the first item kept second")
	}
	if v, ok := f.Take(); ok || v != nil {
		t.Fatalf("Take of an empty Free gave %v, %v", v, ok)
	}
	f.Keep(c, 2)
	f.Drop()
	if len(f.Kept()) != 0 {
		t.Fatal("Drop left items kept")
	}
}
