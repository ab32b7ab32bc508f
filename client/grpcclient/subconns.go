package grpcclient

import (
	"math/bits"
	"unsafe"

	"google.golang.org/grpc/balancer"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// subConns maps the ready endpoints of a picker to their SubConns: an
// open-addressing table keyed by the endpoint's address (Go's heap does
// not move objects), built once per picker. Every pick looks up the
// endpoint the policy chose; this costs a third of a map lookup
// (BenchmarkSubConnLookup).
type subConns struct {
	shift uint // 64 - log2(len(eps))
	eps   []*endpoint.Endpoint
	scs   []balancer.SubConn
}

// newSubConns builds the table for m, with at least twice as many slots as
// entries so that probe runs stay short.
func newSubConns(m map[*endpoint.Endpoint]balancer.SubConn) subConns {
	size := 1 << bits.Len(uint(2*len(m)))
	t := subConns{shift: uint(64 - bits.TrailingZeros(uint(size))), eps: make([]*endpoint.Endpoint, size), scs: make([]balancer.SubConn, size)}
	for ep, sc := range m {
		i := t.slot(ep)
		for t.eps[i] != nil {
			i = (i + 1) & (size - 1)
		}
		t.eps[i], t.scs[i] = ep, sc
	}
	return t
}

// slot is ep's home slot: Fibonacci hashing of its address.
func (t *subConns) slot(ep *endpoint.Endpoint) int {
	return int(uint64(uintptr(unsafe.Pointer(ep))) * 0x9E3779B97F4A7C15 >> t.shift)
}

// get returns ep's SubConn, or false when ep is not in the table.
func (t *subConns) get(ep *endpoint.Endpoint) (balancer.SubConn, bool) {
	mask := len(t.eps) - 1
	for i := t.slot(ep); ; i = (i + 1) & mask {
		switch t.eps[i] {
		case nil:
			return nil, false
		case ep:
			return t.scs[i], true
		}
	}
}
