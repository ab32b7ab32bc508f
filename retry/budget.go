package retry

import (
	"math"
	"sync"
	"time"
)

// budgetSlots is how many slots the budget's sliding window is cut into.
// An entry leaves the window within one slot (window/10) of its age
// reaching the window.
const budgetSlots = 10

// Budget limits retries to a fraction of recent requests, so that when an
// upstream fails every request the retries add at most that fraction to its
// load instead of multiplying it by the attempt count.
//
// Every request deposits (Deposit) and every retry must withdraw
// (TryWithdraw). Over the sliding window a withdrawal succeeds while
//
//	retries + 1 <= ratio × requests + min_retries_per_second × window
//
// so within any one window, attempts <= (1 + ratio) × requests + floor.
// The window is cut into 10 slots; an entry expires as its slot leaves the
// window. Methods take the current time, for deterministic tests; a nil
// *Budget allows every retry. It is safe for concurrent use and does not
// allocate.
type Budget struct {
	mu         sync.Mutex
	slot       int64 // slot length in nanoseconds
	ratioMilli int64 // ratio in thousandths of a retry per request
	floorMilli int64 // the min_retries_per_second reserve, in thousandths
	head       int64 // index (time / slot) of the newest slot
	deposits   [budgetSlots]int64
	withdraws  [budgetSlots]int64
	sumDep     int64
	sumWd      int64
}

// NewBudget returns an empty budget with p's budget_percent, budget_window
// and min_retries_per_second (defaults for zero fields). Share one per
// upstream (or route): the budget is about the load on what is retried.
func NewBudget(p Policy) *Budget {
	p = p.WithDefaults()
	return &Budget{
		slot:       max(int64(p.BudgetWindow)/budgetSlots, 1),
		ratioMilli: int64(math.Round(p.BudgetPercent * 10)),
		floorMilli: int64(math.Round(p.MinRetriesPerSecond * p.BudgetWindow.Seconds() * 1000)),
	}
}

// advance moves the window to now, dropping the slots that left it. Time
// that goes backwards counts in the newest slot.
func (b *Budget) advance(now time.Time) int {
	idx := now.UnixNano() / b.slot
	if idx > b.head {
		n := min(idx-b.head, budgetSlots)
		for i := int64(1); i <= n; i++ {
			s := (b.head + i) % budgetSlots
			b.sumDep -= b.deposits[s]
			b.sumWd -= b.withdraws[s]
			b.deposits[s], b.withdraws[s] = 0, 0
		}
		b.head = idx
	}
	return int(b.head % budgetSlots)
}

// Deposit records one request (its first attempt) at now.
func (b *Budget) Deposit(now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	s := b.advance(now)
	b.deposits[s]++
	b.sumDep++
	b.mu.Unlock()
}

// TryWithdraw reports whether one retry at now fits the budget, and if so
// records it.
func (b *Budget) TryWithdraw(now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.advance(now)
	if (b.sumWd+1)*1000 > b.sumDep*b.ratioMilli+b.floorMilli {
		return false
	}
	b.withdraws[s]++
	b.sumWd++
	return true
}

// Counts returns the requests and retries in the window at now.
func (b *Budget) Counts(now time.Time) (requests, retries int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.sumDep, b.sumWd
}
