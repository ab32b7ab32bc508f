package balance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// policyVariants returns every registered policy with its test
// configuration, plus the variants that change the pick path: bounded loads
// for the hashing policies and a running slow start for the weighted ones.
func policyVariants() map[string]Config {
	out := map[string]Config{}
	for _, p := range builtinPolicies {
		cfg := testConfig(p)
		if p == MaglevName {
			cfg.TableSize = 4099 // a prime small enough to rebuild hundreds of times under -race
		}
		out[p] = cfg
		if hashing(p) {
			b := cfg
			b.BoundedLoad = 1.25
			out[p+"+bounded_load"] = b
		}
		for _, s := range slowStartPolicies {
			if s == p {
				ss := cfg
				ss.SlowStart = time.Minute
				out[p+"+slow_start"] = ss
			}
		}
	}
	return out
}

// TestConcurrentPicksAndUpdates runs, for every policy, four goroutines
// picking (with keys, retries, errors, cancellations and load reports)
// against one that keeps replacing the snapshot, under -race. Every pick
// must come from the snapshot's pool and every in-flight count must return
// to zero.
func TestConcurrentPicksAndUpdates(t *testing.T) {
	for name, cfg := range policyVariants() {
		t.Run(name, func(t *testing.T) {
			eps := newEndpoints(5, 3, 1, 1, 2, 4, 1, 1)
			// Two endpoints are new, so that slow start has a ramp to run.
			eps[6].SetStatus(endpoint.Healthy, "added", time.Now())
			eps[7].SetStatus(endpoint.Healthy, "added", time.Now())
			sets := []*endpoint.Set{
				setOf(eps),
				setOf(eps[:3]),
				{All: eps, Ready: eps[2:]},
				{All: eps},
				setOf(eps[4:]),
				setOf(append(append([]*endpoint.Endpoint{}, eps[5:]...), eps[:2]...)),
			}
			b := mustNew(t, cfg, 0)
			if r, ok := b.(randSetter); ok { // the runtime's generator: a seeded one is not for concurrent use
				r.setRand(nil)
			}
			b.Update(sets[0])
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			if r, ok := b.(Runner); ok {
				wg.Add(1)
				go func() { defer wg.Done(); _ = r.Run(ctx) }()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 300 {
					b.Update(sets[i%len(sets)])
				}
			}()
			var pickers sync.WaitGroup
			for g := range 4 {
				pickers.Add(1)
				go func() {
					defer pickers.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					var info Info
					for i := range 3000 {
						info.Key, info.HasKey = fmt.Sprintf("k%d", r.IntN(100)), r.IntN(10) > 0
						info.Tried = info.Tried[:0]
						if r.IntN(4) == 0 {
							info.Tried = append(info.Tried, eps[r.IntN(len(eps))])
						}
						res, err := b.Pick(&info)
						if errors.Is(err, ErrNoEndpoint) {
							continue
						}
						if err != nil || res.Endpoint == nil || res.Done == nil {
							t.Errorf("pick %d: %+v, %v", i, res, err)
							return
						}
						o := endpoint.Outcome{Latency: time.Duration(r.IntN(1e7)), LoadReport: "cpu=0.5, mem=0.25"}
						switch r.IntN(5) {
						case 0:
							o.Err = errors.New("reset")
						case 1:
							o.Err, o.Canceled = context.Canceled, true
						case 2:
							o.Status = 503
						}
						res.Done(o)
					}
				}()
			}
			pickers.Wait()
			cancel()
			wg.Wait()
			if rb := rebuilderOf(b); rb != nil {
				rb.rebuildAt(time.Now().Add(time.Hour)) // end any ramp and its timer
			}
			for _, ep := range eps {
				if n := ep.InFlight(); n != 0 {
					t.Errorf("%s has %d in flight after every Done", ep.Address(), n)
				}
			}
		})
	}
}

// TestPickAndDoneDoNotAllocate pins zero allocations per Pick + Done for
// every policy and variant, keyed and keyless, first try and retry.
func TestPickAndDoneDoNotAllocate(t *testing.T) {
	for name, cfg := range policyVariants() {
		t.Run(name, func(t *testing.T) {
			eps := newEndpoints(5, 3, 1, 1, 2)
			eps[4].SetStatus(endpoint.Healthy, "added", time.Now()) // ramping under slow start
			b := mustNew(t, cfg, 1)
			b.Update(setOf(eps))
			defer func() {
				if rb := rebuilderOf(b); rb != nil {
					rb.rebuildAt(time.Now().Add(time.Hour))
				}
			}()
			for _, info := range []*Info{
				{Key: "user-42", HasKey: true},
				{},
				{Key: "user-42", HasKey: true, Tried: eps[:2]},
				nil,
			} {
				o := endpoint.Outcome{Latency: time.Millisecond, Status: 200, LoadReport: "cpu=0.42, mem=0.31"}
				allocs := testing.AllocsPerRun(1000, func() {
					r, err := b.Pick(info)
					if err != nil {
						t.Fatal(err)
					}
					r.Done(o)
				})
				if allocs != 0 {
					t.Errorf("Pick+Done with %+v allocates %.1f times per pick, want 0", info, allocs)
				}
			}
		})
	}
}

// TestUpdatesAreIndependent: an Update to one balancer leaves another of
// the same policy on its own snapshot.
func TestUpdatesAreIndependent(t *testing.T) {
	for name, cfg := range policyVariants() {
		a, b := mustNew(t, cfg, 1), mustNew(t, cfg, 2)
		one, other := newEndpoints(1, 1), newEndpoints(1)
		a.Update(setOf(one))
		b.Update(setOf(other))
		for range 20 {
			r, err := a.Pick(&Info{Key: "k", HasKey: true})
			if err != nil {
				t.Fatal(err)
			}
			r.Done(endpoint.Outcome{})
			if r.Endpoint == other[0] {
				t.Fatalf("%s: a balancer picked an endpoint from another balancer's Update", name)
			}
		}
		if rb := rebuilderOf(a); rb != nil {
			rb.rebuildAt(time.Now().Add(time.Hour))
			rebuilderOf(b).rebuildAt(time.Now().Add(time.Hour))
		}
	}
}

func TestEmptySnapshotHasNoEndpoint(t *testing.T) {
	for name, cfg := range policyVariants() {
		b := mustNew(t, cfg, 1)
		for _, info := range []*Info{{}, {Key: "k", HasKey: true}, nil} {
			if _, err := b.Pick(info); !errors.Is(err, ErrNoEndpoint) {
				t.Errorf("%s: Pick before any Update = %v, want ErrNoEndpoint", name, err)
			}
		}
		b.Update(&endpoint.Set{All: newEndpoints(1)})
		if _, err := b.Pick(&Info{Key: "k", HasKey: true}); !errors.Is(err, ErrNoEndpoint) {
			t.Errorf("%s: Pick with nothing ready = %v, want ErrNoEndpoint", name, err)
		}
	}
}
