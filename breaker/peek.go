package breaker

import "time"

// Peek reports what Allow(now) would decide, without admitting anything:
// the state, whether a call would go through, and, for an open breaker,
// how long until it turns half-open. A half-open breaker lets a call
// through while it has a probe slot free. For explaining a decision
// (GET /api/v1/explain), not for the request path.
func (b *Breaker) Peek(now time.Time) (state State, allowed bool, halfOpenIn time.Duration) {
	p := b.cur.Load()
	switch {
	case p.state == Closed:
		return Closed, true, 0
	case p.state == Open && now.Sub(p.openedAt) < p.openFor:
		return Open, false, p.openFor - now.Sub(p.openedAt)
	case p.state == Open:
		// Due to turn half-open: the next call would be its first probe.
		return HalfOpen, b.cfg.HalfOpenProbes > 0, 0
	}
	b.mu.Lock()
	free := p.probes < b.cfg.HalfOpenProbes
	b.mu.Unlock()
	return HalfOpen, free, 0
}
