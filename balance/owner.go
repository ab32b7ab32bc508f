package balance

import "github.com/switchboard-dev/switchboard/endpoint"

// Owner is a hashing policy that can say, without picking, where a key
// lives: the endpoint Pick would choose for it on a first attempt when
// load bounds do not intervene. For explaining a decision (GET
// /api/v1/explain); Pick remains the call on the request path.
type Owner interface {
	// Owner returns the key's endpoint on the current snapshot, or false
	// when there is none (no ready endpoint).
	Owner(key string) (*endpoint.Endpoint, bool)
}

// Owner returns the endpoint that owns key's arc of the ring.
func (c *ConsistentHash) Owner(key string) (*endpoint.Endpoint, bool) {
	s := c.snap.Load()
	if s == nil || len(s.points) == 0 {
		return nil, false
	}
	if c.md5 {
		hi, lo := md5Key(key)
		return s.eps[s.owners[s.find128(hi, lo)]], true
	}
	return s.eps[s.owners[s.find(hashString(key)&^ownerMask)]], true
}

// Owner returns the endpoint of key's slot in the lookup table.
func (b *Maglev) Owner(key string) (*endpoint.Endpoint, bool) {
	s := b.snap.Load()
	if s == nil || len(s.table) == 0 {
		return nil, false
	}
	return s.eps[s.table[int(bounded(hashString(key), uint64(len(s.table))))]], true
}
