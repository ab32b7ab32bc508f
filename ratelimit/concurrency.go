package ratelimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// Errors of Concurrency.Acquire.
var (
	// ErrConcurrencyLimited: every slot is taken and the queue is full
	// (or there is none).
	ErrConcurrencyLimited = errors.New("ratelimit: concurrency limit reached")
	// ErrQueueTimeout: the request waited MaxWait in the queue without
	// getting a slot.
	ErrQueueTimeout = errors.New("ratelimit: timed out waiting for a concurrency slot")
)

// ConcurrencyConfig configures a Concurrency limiter: the concurrency limit
// of a route or an upstream. The yaml tags are the keys of its block.
type ConcurrencyConfig struct {
	// MaxInFlight is how many requests may be in progress at once.
	// Required (at least 1).
	MaxInFlight int `yaml:"max_in_flight"`
	// Queue is how many more may wait, first in first out, for a slot.
	// Default 0: none, a request finding every slot taken is rejected.
	Queue int `yaml:"queue"`
	// MaxWait is the longest a request waits in the queue. Default 0: only
	// the request's context bounds the wait. Only with a queue.
	MaxWait time.Duration `yaml:"max_wait"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (c ConcurrencyConfig) Validate() error {
	var errs []error
	if c.MaxInFlight < 1 {
		errs = append(errs, field.Errorf("max_in_flight", "must be at least 1, got %d", c.MaxInFlight))
	}
	if c.Queue < 0 {
		errs = append(errs, field.Errorf("queue", "must not be negative, got %d", c.Queue))
	}
	if c.MaxWait < 0 {
		errs = append(errs, field.Errorf("max_wait", "must not be negative, got %v", c.MaxWait))
	} else if c.MaxWait > 0 && c.Queue == 0 {
		errs = append(errs, field.Errorf("max_wait", "needs a queue"))
	}
	return errors.Join(errs...)
}

// Concurrency caps the requests in progress at MaxInFlight, with an
// optional FIFO queue of bounded length and wait. Acquire takes no lock
// beyond one short mutex section and allocates nothing when a slot is free.
type Concurrency struct {
	mu       sync.Mutex
	inFlight int
	waiters  list.List // of *waiter, oldest first
	max      int
	queue    int
	maxWait  time.Duration
	release  func() // c.done, bound once so that Acquire does not allocate
}

type waiter struct {
	ready chan struct{} // closed when a slot is handed over
	elem  *list.Element
}

// NewConcurrency returns the limiter c describes, after validating it.
func NewConcurrency(c ConcurrencyConfig) (*Concurrency, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	l := &Concurrency{max: c.MaxInFlight, queue: c.Queue, maxWait: c.MaxWait}
	l.release = l.done
	return l, nil
}

// Acquire takes a slot, waiting in the queue if every slot is taken and the
// queue has room. The caller must call release exactly once when the
// request is done (calling it more often than Acquire succeeded panics; a
// release on behalf of another request goes unnoticed). It returns
// ErrConcurrencyLimited when the queue is full, ErrQueueTimeout after
// MaxWait in the queue, or ctx's error, wrapped, if ctx ends first.
func (c *Concurrency) Acquire(ctx context.Context) (release func(), err error) {
	c.mu.Lock()
	// A new request may take a free slot only if nobody is queued for it:
	// FIFO.
	if c.inFlight < c.max && c.waiters.Len() == 0 {
		c.inFlight++
		c.mu.Unlock()
		return c.release, nil
	}
	if c.waiters.Len() >= c.queue {
		c.mu.Unlock()
		return nil, ErrConcurrencyLimited
	}
	w := &waiter{ready: make(chan struct{})}
	w.elem = c.waiters.PushBack(w)
	c.mu.Unlock()

	var timeout <-chan time.Time
	if c.maxWait > 0 {
		t := time.NewTimer(c.maxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ready:
		return c.release, nil
	case <-timeout:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = fmt.Errorf("ratelimit: waiting for a concurrency slot: %w", ctx.Err())
	}
	c.mu.Lock()
	select {
	case <-w.ready:
		// done handed us a slot just as we gave up: pass it on.
		c.mu.Unlock()
		c.done()
	default:
		c.waiters.Remove(w.elem)
		c.mu.Unlock()
	}
	return nil, err
}

// TryAcquire takes a slot if one is free now and nobody is queued for it,
// and never waits.
func (c *Concurrency) TryAcquire() (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight < c.max && c.waiters.Len() == 0 {
		c.inFlight++
		return c.release, true
	}
	return nil, false
}

// done releases a slot: to the oldest waiter if any, else back to the pool.
func (c *Concurrency) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if front := c.waiters.Front(); front != nil {
		w := c.waiters.Remove(front).(*waiter)
		close(w.ready)
		return
	}
	if c.inFlight == 0 {
		panic("ratelimit: Concurrency release called more times than Acquire succeeded")
	}
	c.inFlight--
}

// Queue returns how many requests may wait for a slot (ConcurrencyConfig.Queue):
// with 0, Acquire never waits, so a caller that must not block can follow a
// failed TryAcquire with the rejection Acquire would return,
// ErrConcurrencyLimited, instead of waiting for Acquire elsewhere.
func (c *Concurrency) Queue() int { return c.queue }

// InFlight returns the number of slots taken.
func (c *Concurrency) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Waiting returns the number of requests in the queue.
func (c *Concurrency) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters.Len()
}
