package endpoint

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Set is an immutable snapshot of a pool. Readers must not modify it.
type Set struct {
	// Version grows by one with every snapshot a pool publishes.
	Version uint64
	// All holds every endpoint of the pool in a stable order (the order of
	// the specs that built it).
	All []*Endpoint
	// Ready holds the endpoints whose state is Serving, in the same order.
	Ready []*Endpoint
}

// Pool is the named set of endpoints of one upstream. It publishes a new
// Set whenever its membership or an endpoint's serving state changes, and
// hands each new Set to its subscribers (the balancer) synchronously.
type Pool struct {
	name string

	mu      sync.Mutex // serialises updates; never taken on the pick path
	byAddr  map[string]*Endpoint
	order   []*Endpoint
	subs    map[int]func(*Set)
	nextSub int
	version uint64

	snap atomic.Pointer[Set]
}

// NewPool returns an empty pool.
func NewPool(name string) *Pool {
	p := &Pool{name: name, byAddr: map[string]*Endpoint{}}
	p.snap.Store(&Set{})
	return p
}

// Name is the upstream's name.
func (p *Pool) Name() string { return p.name }

// Snapshot returns the current Set. It never blocks.
func (p *Pool) Snapshot() *Set { return p.snap.Load() }

// Subscribe registers fn to receive every new Set, starting with the current
// one (delivered before Subscribe returns). Sets are delivered one at a time,
// in order. The returned func cancels the subscription.
func (p *Pool) Subscribe(fn func(*Set)) (cancel func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[int]func(*Set){}
	}
	id := p.nextSub
	p.nextSub++
	p.subs[id] = fn
	fn(p.snap.Load())
	return func() {
		p.mu.Lock()
		delete(p.subs, id)
		p.mu.Unlock()
	}
}

// Update replaces the pool's membership with specs. An endpoint whose spec is
// unchanged keeps its Endpoint (and with it its live state); a new or changed
// one gets a fresh Endpoint. It returns the endpoints that left the pool so
// that their owners (health checkers) can stop.
func (p *Pool) Update(specs []Spec) (removed []*Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]*Endpoint, len(specs))
	order := make([]*Endpoint, 0, len(specs))
	for _, s := range specs {
		if s.Weight < 1 {
			s.Weight = 1
		}
		if _, dup := next[s.Address]; dup {
			continue
		}
		ep := p.byAddr[s.Address]
		if ep == nil || !sameSpec(ep.spec, s) {
			ep = New(s)
		}
		next[s.Address] = ep
		order = append(order, ep)
	}
	for addr, ep := range p.byAddr {
		if next[addr] != ep {
			removed = append(removed, ep)
		}
	}
	p.byAddr = next
	p.order = order
	p.publishLocked()
	return removed
}

// Refresh publishes a new Set after endpoints' states changed. Callers that
// change state with SetStatus call it when SetStatus reports a change.
func (p *Pool) Refresh() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.publishLocked()
}

func (p *Pool) publishLocked() {
	p.version++
	s := &Set{Version: p.version, All: p.order, Ready: make([]*Endpoint, 0, len(p.order))}
	for _, ep := range p.order {
		if ep.State().Serving() {
			s.Ready = append(s.Ready, ep)
		}
	}
	p.snap.Store(s)
	for _, fn := range p.subs {
		fn(s)
	}
}

func sameSpec(a, b Spec) bool {
	return a.Address == b.Address && a.ID == b.ID && a.Weight == b.Weight && a.Zone == b.Zone && maps.Equal(a.Meta, b.Meta)
}
