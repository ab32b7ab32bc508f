package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// TestHashStringIsStable pins the key hash: every switchboard instance and
// release must send a key to the same endpoint.
func TestHashStringIsStable(t *testing.T) {
	for in, want := range map[string]uint64{
		"":            0xefd01f60ba992926,
		"user-42":     0xa39532c7ab051e8d,
		"10.0.0.1:80": 0x5ed8f8275e47a14a,
	} {
		if got := hashString(in); got != want {
			t.Errorf("hashString(%q) = %#x, want %#x: changing the hash remaps every user's keys", in, got, want)
		}
	}
}

func TestParseHashKey(t *testing.T) {
	for in, want := range map[string]HashKey{
		"header:x-user-id": {Source: HashKeyHeader, Name: "X-User-Id"},
		"cookie:sid":       {Source: HashKeyCookie, Name: "sid"},
		"client_ip":        {Source: HashKeyClientIP},
		"path":             {Source: HashKeyPath},
		"query:q":          {Source: HashKeyQuery, Name: "q"},
	} {
		got, err := ParseHashKey(in)
		if err != nil || got != want {
			t.Errorf("ParseHashKey(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if _, err := ParseHashKey(got.String()); err != nil {
			t.Errorf("ParseHashKey(%q.String() = %q): %v", in, got.String(), err)
		}
	}
	for _, in := range []string{"", "header", "header:", "header:bad name", "cookie:a;b", "client_ip:x", "path:/a", "query:", "query:a&b", "body:x", "HEADER:X"} {
		if k, err := ParseHashKey(in); err == nil {
			t.Errorf("ParseHashKey(%q) = %+v, want an error", in, k)
		}
	}
}

// owners maps every key to the address of the endpoint b picks for it.
func owners(t *testing.T, b Balancer, ks []string) map[string]string {
	t.Helper()
	m := make(map[string]string, len(ks))
	for _, k := range ks {
		r, err := b.Pick(&Info{Key: k, HasKey: true})
		if err != nil {
			t.Fatal(err)
		}
		m[k] = r.Endpoint.Address()
		r.Done(endpoint.Outcome{})
	}
	return m
}

func moved(a, b map[string]string) float64 {
	n := 0
	for k, v := range a {
		if b[k] != v {
			n++
		}
	}
	return float64(n) / float64(len(a))
}

func TestHashingRemapsFewKeysWhenOneOfTenChanges(t *testing.T) {
	ks := keys(100_000)
	for _, tc := range []struct {
		policy string
		slack  float64 // allowed beyond the 1/10 that must move
	}{{ConsistentHashName, 0.03}, {MaglevName, 0.05}} {
		t.Run(tc.policy, func(t *testing.T) {
			eps := newEndpoints(equalWeights(11)...)
			b := mustNew(t, testConfig(tc.policy), 1)
			b.Update(setOf(eps[:10]))
			ten := owners(t, b, ks)

			// Remove one of ten.
			without := append(append([]*endpoint.Endpoint{}, eps[:3]...), eps[4:10]...)
			b.Update(setOf(without))
			nine := owners(t, b, ks)
			t.Logf("removing 1 of 10 moved %.2f%% of keys", 100*moved(ten, nine))
			if f := moved(ten, nine); f > 0.1+tc.slack {
				t.Errorf("removing 1 of 10 endpoints moved %.2f%% of keys, want <= %.0f%%", 100*f, 100*(0.1+tc.slack))
			}
			if tc.policy == ConsistentHashName {
				for k, a := range ten {
					if a != eps[3].Address() && nine[k] != a {
						t.Fatalf("key %s moved from %s, which stayed: a ring moves only the removed endpoint's keys", k, a)
					}
				}
			}

			// Add an eleventh.
			b.Update(setOf(eps))
			eleven := owners(t, b, ks)
			t.Logf("adding an 11th to 10 moved %.2f%% of keys", 100*moved(ten, eleven))
			if f := moved(ten, eleven); f > 0.1+tc.slack {
				t.Errorf("adding 1 to 10 endpoints moved %.2f%% of keys, want <= %.0f%%", 100*f, 100*(0.1+tc.slack))
			}
		})
	}
}

// skewedKeys draws n keys of which 60% are one hot key and the rest follow
// a Zipf law over 1000 keys.
func skewedKeys(n int) []string {
	r := rand.New(rand.NewPCG(3, 3))
	z := rand.NewZipf(r, 1.2, 1, 999)
	out := make([]string, n)
	for i := range out {
		if r.Float64() < 0.6 {
			out[i] = "hot"
		} else {
			out[i] = fmt.Sprintf("key-%d", z.Uint64())
		}
	}
	return out
}

// TestBoundedLoadCapsEveryEndpoint holds picks of a skewed key set and
// checks that no endpoint ever takes more than ceil(1.25 x the average)
// of the requests in flight, first while 1000 picks pile up, then while a
// window of 500 rolls over 20,000 more.
func TestBoundedLoadCapsEveryEndpoint(t *testing.T) {
	const c, n = 1.25, 10
	for _, policy := range []string{ConsistentHashName, MaglevName} {
		t.Run(policy, func(t *testing.T) {
			eps := newEndpoints(equalWeights(n)...)
			cfg := testConfig(policy)
			cfg.BoundedLoad = c
			b := mustNew(t, cfg, 1)
			b.Update(setOf(eps))
			var held []Result
			var total int64
			check := func(i int, r Result) {
				bound := int64(math.Ceil(c * float64(total) / n))
				if in := r.Endpoint.InFlight(); in > bound {
					t.Fatalf("pick %d: %s has %d in flight, more than ceil(%.2f x %d / %d) = %d", i, r.Endpoint.Address(), in, c, total, n, bound)
				}
			}
			ks := skewedKeys(21_000)
			for i, k := range ks {
				r, err := b.Pick(&Info{Key: k, HasKey: true})
				if err != nil {
					t.Fatal(err)
				}
				total++
				check(i, r)
				held = append(held, r)
				if i == 999 {
					var maxIn int64
					for _, ep := range eps {
						maxIn = max(maxIn, ep.InFlight())
					}
					if bound := int64(math.Ceil(c * float64(total) / n)); maxIn > bound {
						t.Fatalf("after 1000 held picks the busiest endpoint holds %d, more than %d", maxIn, bound)
					}
				}
				if i >= 999 {
					// Shrink the window to 500, two at a time, then roll it.
					drop := min(2, len(held)-500)
					for _, r := range held[:drop] {
						r.Done(endpoint.Outcome{})
						total--
					}
					held = held[drop:]
				}
			}
			for _, r := range held {
				r.Done(endpoint.Outcome{})
			}
			for _, ep := range eps {
				if ep.InFlight() != 0 {
					t.Fatalf("%s still has %d in flight after every Done", ep.Address(), ep.InFlight())
				}
			}
		})
	}
}

// TestSkewedKeysOverloadWithoutBound shows the key set of
// TestBoundedLoadCapsEveryEndpoint is skewed enough to matter.
func TestSkewedKeysOverloadWithoutBound(t *testing.T) {
	eps := newEndpoints(equalWeights(10)...)
	b := mustNew(t, testConfig(ConsistentHashName), 1)
	b.Update(setOf(eps))
	for _, k := range skewedKeys(1000) {
		if _, err := b.Pick(&Info{Key: k, HasKey: true}); err != nil {
			t.Fatal(err)
		}
	}
	var maxIn int64
	for _, ep := range eps {
		maxIn = max(maxIn, ep.InFlight())
	}
	if maxIn < 250 {
		t.Fatalf("busiest endpoint holds only %d of 1000 without bounded_load; the test key set is not skewed", maxIn)
	}
}

func TestHashingSendsKeylessRequestsToFallback(t *testing.T) {
	for _, policy := range []string{ConsistentHashName, MaglevName} {
		eps := newEndpoints(1, 1, 1)
		b := mustNew(t, testConfig(policy), 1)
		b.Update(setOf(eps))
		for i := range 6 {
			r, err := b.Pick(&Info{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Endpoint != eps[i%3] {
				t.Fatalf("%s: keyless pick %d went to %s, want %s (round_robin fallback)", policy, i, r.Endpoint.Address(), eps[i%3].Address())
			}
			r.Done(endpoint.Outcome{})
		}
	}
}

func TestHashingSameKeySameEndpointAndRetriesElsewhere(t *testing.T) {
	for _, policy := range []string{ConsistentHashName, MaglevName} {
		eps := newEndpoints(equalWeights(5)...)
		b := mustNew(t, testConfig(policy), 1)
		b.Update(setOf(eps))
		first, _ := b.Pick(&Info{Key: "alice", HasKey: true})
		first.Done(endpoint.Outcome{})
		for range 10 {
			r, _ := b.Pick(&Info{Key: "alice", HasKey: true})
			r.Done(endpoint.Outcome{})
			if r.Endpoint != first.Endpoint {
				t.Fatalf("%s: key alice went to %s, then %s", policy, first.Endpoint.Address(), r.Endpoint.Address())
			}
		}
		r, _ := b.Pick(&Info{Key: "alice", HasKey: true, Tried: []*endpoint.Endpoint{first.Endpoint}})
		r.Done(endpoint.Outcome{})
		if r.Endpoint == first.Endpoint {
			t.Fatalf("%s: a retry of alice went back to %s, which it already tried", policy, first.Endpoint.Address())
		}
	}
}

func TestMaglevTableFollowsWeights(t *testing.T) {
	eps := newEndpoints(5, 3, 1, 1)
	table := maglevTable(eps, effWeights(eps, nil), 65537)
	counts := make([]int, len(eps))
	for _, i := range table {
		counts[i]++
	}
	for i, w := range []float64{5, 3, 1, 1} {
		want := w / 10 * 65537
		if math.Abs(float64(counts[i])-want) > 0.001*65537 {
			t.Errorf("endpoint %d (weight %v) owns %d slots, want %.0f", i, w, counts[i], want)
		}
	}
}

func TestRadixSortSorts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{0, 1, 255, 256, 1000, 100_000} {
		a := make([]uint64, n)
		for i := range a {
			a[i] = r.Uint64()
			if i%7 == 0 {
				a[i] &= 0xffff // some small values, so that high bytes agree
			}
		}
		want := slices.Clone(a)
		slices.Sort(want)
		radixSort(a)
		if !slices.Equal(a, want) {
			t.Fatalf("radixSort of %d values is not sorted", n)
		}
	}
}
