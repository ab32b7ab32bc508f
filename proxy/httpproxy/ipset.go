package httpproxy

import (
	"encoding/binary"
	"net/netip"
	"sort"
)

// ipSet is a set of IP prefixes, precomputed for lookups that take
// O(log n) and allocate nothing: the prefixes as address ranges, sorted
// and merged, IPv4 and IPv6 apart. IPv4 addresses are held as IPv4
// (an IPv4-mapped IPv6 address must be unmapped before a lookup).
type ipSet struct {
	v4 []span4
	v6 []span6
}

type span4 struct{ lo, hi uint32 }

// span6 holds 128-bit addresses as [high, low] 64-bit halves.
type span6 struct{ lo, hi [2]uint64 }

// newIPSet builds the set of prefixes, which must be valid and masked.
func newIPSet(prefixes []netip.Prefix) *ipSet {
	s := &ipSet{}
	for _, p := range prefixes {
		a := p.Addr()
		if a.Is4() {
			b := a.As4()
			lo := binary.BigEndian.Uint32(b[:])
			// A shift by the width or more is 0 in Go: /32 has no host bits.
			s.v4 = append(s.v4, span4{lo, lo | ^uint32(0)>>p.Bits()})
			continue
		}
		b := a.As16()
		lo := [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
		hi := lo
		if bits := p.Bits(); bits <= 64 {
			hi[0] |= ^uint64(0) >> bits
			hi[1] = ^uint64(0)
		} else {
			hi[1] |= ^uint64(0) >> (bits - 64)
		}
		s.v6 = append(s.v6, span6{lo, hi})
	}
	sort.Slice(s.v4, func(i, j int) bool { return s.v4[i].lo < s.v4[j].lo })
	sort.Slice(s.v6, func(i, j int) bool { return less128(s.v6[i].lo, s.v6[j].lo) })
	s.v4 = merge4(s.v4)
	s.v6 = merge6(s.v6)
	return s
}

func merge4(in []span4) []span4 {
	out := in[:0]
	for _, r := range in {
		if n := len(out); n > 0 && (r.lo <= out[n-1].hi || out[n-1].hi != ^uint32(0) && r.lo == out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func merge6(in []span6) []span6 {
	out := in[:0]
	for _, r := range in {
		if n := len(out); n > 0 && !less128(out[n-1].hi, r.lo) {
			if less128(out[n-1].hi, r.hi) {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func less128(a, b [2]uint64) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

// contains reports whether a (unmapped) is in the set.
func (s *ipSet) contains(a netip.Addr) bool {
	if a.Is4() {
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		// The first span that ends at or after x is the only one that
		// can hold it.
		i := sort.Search(len(s.v4), func(i int) bool { return s.v4[i].hi >= x })
		return i < len(s.v4) && s.v4[i].lo <= x
	}
	b := a.As16()
	x := [2]uint64{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
	i := sort.Search(len(s.v6), func(i int) bool { return !less128(s.v6[i].hi, x) })
	return i < len(s.v6) && !less128(x, s.v6[i].lo)
}
