package balance

import (
	"testing"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// TestOwnerIsWherePickSendsTheKey: for each hashing policy (the ring with
// either hash, maglev), Owner names the endpoint Pick chooses for every
// key, and picks nothing itself.
func TestOwnerIsWherePickSendsTheKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"consistent_hash", testConfig(ConsistentHashName)},
		{"consistent_hash md5", func() Config { c := testConfig(ConsistentHashName); c.Hash = HashMD5; return c }()},
		{"maglev", testConfig(MaglevName)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustNew(t, tc.cfg, 1)
			o, ok := b.(Owner)
			if !ok {
				t.Fatalf("%T does not implement Owner", b)
			}
			if _, ok := o.Owner("k"); ok {
				t.Fatal("Owner found an endpoint before any snapshot")
			}
			eps := newEndpoints(1, 2, 1, 3)
			b.Update(setOf(eps))
			seen := map[*endpoint.Endpoint]bool{}
			for _, k := range keys(500) {
				owner, ok := o.Owner(k)
				if !ok || owner.InFlight() != 0 {
					t.Fatalf("key %s: Owner = %v, %v with %d in flight; want an endpoint, nothing picked", k, owner, ok, owner.InFlight())
				}
				res, err := b.Pick(&Info{Key: k, HasKey: true})
				if err != nil {
					t.Fatal(err)
				}
				res.Done(endpoint.Outcome{})
				if res.Endpoint != owner {
					t.Fatalf("key %s: Owner says %s, Pick chose %s", k, owner.Address(), res.Endpoint.Address())
				}
				seen[owner] = true
			}
			if len(seen) != len(eps) {
				t.Fatalf("500 keys landed on %d of %d endpoints: the test needs them all", len(seen), len(eps))
			}
		})
	}
}
