package evloop

import (
	"math/rand"
	"slices"
	"testing"
)

// TestTimersFireInOrderOfTheirTimes arms, re-arms and disarms timers at
// random and checks that fire runs exactly the armed ones that are due,
// earliest first, against a plain list kept alongside.
func TestTimersFireInOrderOfTheirTimes(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	var ts timers
	var fired []int
	all := make([]Timer, 200)
	want := map[int]int64{} // armed timers by index: their time
	for i := range all {
		i := i
		all[i].Fire = func() { fired = append(fired, i) }
	}
	for round := 0; round < 50; round++ {
		for op := 0; op < 100; op++ {
			i := rnd.Intn(len(all))
			if rnd.Intn(4) == 0 {
				ts.disarm(&all[i])
				delete(want, i)
				continue
			}
			when := int64(round*1000 + rnd.Intn(3000))
			ts.arm(&all[i], when)
			want[i] = when
		}
		now := int64(round*1000 + 999)
		var due []int
		for i, w := range want {
			if w <= now {
				due = append(due, i)
			}
		}
		slices.SortFunc(due, func(a, b int) int {
			if want[a] != want[b] {
				return int(want[a] - want[b])
			}
			return a - b
		})
		fired = fired[:0]
		ts.fire(now, nil)
		if len(fired) != len(due) {
			t.Fatalf("round %d: fired %v, want %v", round, fired, due)
		}
		times := map[int]int64{}
		for _, i := range due {
			times[i] = want[i]
		}
		for k, i := range fired {
			if times[i] != times[due[k]] {
				t.Fatalf("round %d: fired %v (times not ascending), want %v", round, fired, due)
			}
			if all[i].Armed() {
				t.Fatalf("round %d: timer %d still armed after it fired", round, i)
			}
			delete(want, i)
		}
		if w, ok := ts.next(); ok != (len(want) > 0) || (ok && w <= now) {
			t.Fatalf("round %d: next is %d, %v with %d armed after firing through %d", round, w, ok, len(want), now)
		}
	}
}

// TestATimerArmedWhileFiringAndDueFiresInTheSameCall: a Fire that re-arms
// a timer at a time already passed (a zero timeout) is run again by the
// same fire, not left for the next iteration.
func TestATimerArmedWhileFiringAndDueFiresInTheSameCall(t *testing.T) {
	var ts timers
	var a, b Timer
	n := 0
	a.Fire = func() { n++; ts.arm(&b, 5) }
	b.Fire = func() { n++ }
	ts.arm(&a, 10)
	ts.fire(10, nil)
	if n != 2 || a.Armed() || b.Armed() {
		t.Fatalf("fired %d (a armed %v, b armed %v), want both fired once and disarmed", n, a.Armed(), b.Armed())
	}
}
