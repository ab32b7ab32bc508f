// Package seriesref deletes Prometheus series once nothing holds them.
//
// Code that caches a vector's child (a Counter from WithLabelValues) must
// not see it deleted while it still counts on it: a deleted child goes on
// counting, unseen. Refs counts the holders of each key (one key names a
// set of series); when the last one lets go, the series are deleted after
// a grace period, unless a holder takes the key back first. The grace lets
// scrapes see the last values. Holding and deleting happen under one lock,
// so a caller that holds a key before it resolves its children can never
// have them deleted under it.
package seriesref

import (
	"sync"
	"time"
)

// Refs counts the holders of keys of type K. Create it with New.
type Refs[K comparable] struct {
	mu      sync.Mutex
	n       map[K]int
	pending map[K]*pending // deletions waiting out the grace
	grace   time.Duration
	del     func(K) // deletes K's series; called with mu held
}

type pending struct{ t *time.Timer }

// New returns a Refs that calls del to delete a key's series once it has
// had no holder for grace. del runs on a timer's goroutine and must not
// call back into the Refs.
func New[K comparable](grace time.Duration, del func(K)) *Refs[K] {
	return &Refs[K]{n: map[K]int{}, pending: map[K]*pending{}, grace: grace, del: del}
}

// Hold adds a holder to each key, canceling a pending deletion. Call it
// before resolving the series the key names.
func (r *Refs[K]) Hold(keys ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.n[k]++
		if p := r.pending[k]; p != nil {
			p.t.Stop()
			delete(r.pending, k)
		}
	}
}

// Release removes a holder from each key; a key left without one has its
// series deleted after the grace. Call it once per Hold, after the last
// use of the cached series.
func (r *Refs[K]) Release(keys ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if r.n[k]--; r.n[k] > 0 {
			continue
		}
		delete(r.n, k)
		p := &pending{}
		p.t = time.AfterFunc(r.grace, func() { r.expire(k, p) })
		r.pending[k] = p
	}
}

// expire deletes k's series unless a holder took k back during the grace.
func (r *Refs[K]) expire(k K, p *pending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[k] != p || r.n[k] > 0 {
		return // taken back (and perhaps let go again: a newer timer)
	}
	delete(r.pending, k)
	r.del(k)
}

// Pending returns the number of keys waiting out the grace.
func (r *Refs[K]) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// SetGrace changes the grace of later releases (tests use 0).
func (r *Refs[K]) SetGrace(d time.Duration) {
	r.mu.Lock()
	r.grace = d
	r.mu.Unlock()
}
