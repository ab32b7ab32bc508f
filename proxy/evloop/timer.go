package evloop

// Timer is a deadline on a loop: when it is due, the loop calls Fire. A
// Timer belongs to what it times (a connection's read-header or idle
// timeout) and is armed again, not allocated again, so that timing a
// request allocates nothing. The zero Timer is disarmed.
type Timer struct {
	// Fire runs on the loop once the timer is due.
	Fire func()

	when  int64 // the loop's clock, in nanoseconds since its epoch
	index int   // in the heap, plus one; 0 when disarmed
}

// Armed reports whether t is waiting to fire.
func (t *Timer) Armed() bool { return t.index > 0 }

// timers is a loop's armed timers as a binary min-heap on when. A heap
// rather than a hashed wheel: a loop holds a few thousand timers at most
// (one or two per connection), where O(log n) re-arming is a handful of
// comparisons, and a heap fires each timer at its exact time with no tick
// to choose.
type timers struct {
	heap []*Timer
}

// arm (re)schedules t at when.
func (ts *timers) arm(t *Timer, when int64) {
	if t.index > 0 {
		t.when = when
		ts.fix(t.index - 1)
		return
	}
	t.when = when
	ts.heap = append(ts.heap, t)
	t.index = len(ts.heap)
	ts.up(len(ts.heap) - 1)
}

// disarm takes t off the heap; a disarmed t is left alone.
func (ts *timers) disarm(t *Timer) {
	i := t.index - 1
	if i < 0 {
		return
	}
	last := len(ts.heap) - 1
	if i != last {
		ts.swap(i, last)
	}
	ts.heap[last] = nil
	ts.heap = ts.heap[:last]
	t.index = 0
	if i != last {
		ts.fix(i)
	}
}

// next returns when the earliest timer is due; ok is false when none is
// armed.
func (ts *timers) next() (when int64, ok bool) {
	if len(ts.heap) == 0 {
		return 0, false
	}
	return ts.heap[0].when, true
}

// fire disarms and fires, earliest first, every timer due at now. A Fire
// may arm timers, itself included; one armed at or before now fires in
// this same call.
// After each Fire, after runs (nil: nothing).
func (ts *timers) fire(now int64, after func()) {
	for len(ts.heap) > 0 && ts.heap[0].when <= now {
		t := ts.heap[0]
		ts.disarm(t)
		t.Fire()
		if after != nil {
			after()
		}
	}
}

func (ts *timers) fix(i int) {
	if !ts.up(i) {
		ts.down(i)
	}
}

func (ts *timers) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if ts.heap[p].when <= ts.heap[i].when {
			break
		}
		ts.swap(i, p)
		i, moved = p, true
	}
	return moved
}

func (ts *timers) down(i int) {
	n := len(ts.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && ts.heap[r].when < ts.heap[l].when {
			m = r
		}
		if ts.heap[i].when <= ts.heap[m].when {
			return
		}
		ts.swap(i, m)
		i = m
	}
}

func (ts *timers) swap(i, j int) {
	h := ts.heap
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i+1, j+1
}
