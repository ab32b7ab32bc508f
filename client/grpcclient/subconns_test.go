package grpcclient

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/balancer"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// fakeSubConn is a SubConn told apart by its name; only identity matters.
type fakeSubConn struct {
	balancer.SubConn
	name string
}

// The table finds every endpoint it was built with, at every size (probe
// runs that wrap around the end included), and no other endpoint.
func TestSubConnsFindsExactlyItsEndpoints(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 8, 100, 1000} {
		m := map[*endpoint.Endpoint]balancer.SubConn{}
		for i := range n {
			m[endpoint.New(endpoint.Spec{Address: fmt.Sprintf("10.0.0.%d:80", i)})] = &fakeSubConn{name: fmt.Sprint(i)}
		}
		tab := newSubConns(m)
		if len(tab.eps) < 2*n {
			t.Errorf("n=%d: %d slots; want at least %d", n, len(tab.eps), 2*n)
		}
		for ep, sc := range m {
			if got, ok := tab.get(ep); !ok || got != sc {
				t.Fatalf("n=%d: get(%s) = %v, %v; want %v, true", n, ep.Address(), got, ok, sc)
			}
		}
		for range 100 {
			other := endpoint.New(endpoint.Spec{Address: "10.1.0.1:80"})
			if got, ok := tab.get(other); ok {
				t.Fatalf("n=%d: get of an endpoint not in the table = %v, true; want false", n, got)
			}
		}
		if _, ok := tab.get(nil); ok {
			t.Fatalf("n=%d: get(nil) found something", n)
		}
	}
}

// BenchmarkSubConnLookup compares the picker's table with the map it
// replaces, over 10 and 1000 endpoints.
//
//	go test -run '^$' -bench SubConnLookup ./client/grpcclient/
func BenchmarkSubConnLookup(b *testing.B) {
	for _, n := range []int{10, 1000} {
		m := map[*endpoint.Endpoint]balancer.SubConn{}
		eps := make([]*endpoint.Endpoint, n)
		for i := range eps {
			eps[i] = endpoint.New(endpoint.Spec{Address: fmt.Sprintf("10.0.0.%d:80", i)})
			m[eps[i]] = &fakeSubConn{name: fmt.Sprint(i)}
		}
		tab := newSubConns(m)
		b.Run(fmt.Sprintf("table/n=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := tab.get(eps[i%n]); !ok {
					b.Fatal("missing")
				}
				i += 7
			}
		})
		b.Run(fmt.Sprintf("map/n=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := m[eps[i%n]]; !ok {
					b.Fatal("missing")
				}
				i += 7
			}
		})
	}
}
