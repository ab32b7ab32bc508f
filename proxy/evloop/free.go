package evloop

// Free is what a loop keeps for reuse — read buffers, pipes, connection
// structs — so that connections that come and go make none: Take returns
// the last one kept, Keep keeps one unless max are kept already. Use it on
// one loop only. The zero Free keeps nothing yet.
type Free[T any] struct{ items []T }

// Take returns a kept item and true, or the zero T and false when none is
// kept.
func (f *Free[T]) Take() (T, bool) {
	var zero T
	n := len(f.items)
	if n == 0 {
		return zero, false
	}
	v := f.items[n-1]
	f.items[n-1] = zero // no reference left behind in the spare capacity
	f.items = f.items[:n-1]
	return v, true
}

// Keep keeps v for a later Take unless max items are kept already, and
// reports whether it did (if not, v is the caller's to drop or close).
func (f *Free[T]) Keep(v T, max int) bool {
	if len(f.items) >= max {
		return false
	}
	f.items = append(f.items, v)
	return true
}

// Kept is the items kept, for a look (a test's) or to close them; they
// are still the Free's.
func (f *Free[T]) Kept() []T { return f.items }

// Drop forgets every item kept (after the caller closed them, if they
// hold anything).
func (f *Free[T]) Drop() { f.items = nil }
