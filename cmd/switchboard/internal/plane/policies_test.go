package plane_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every balancing policy, reached through a real listener to real
// backends. The balance package's own tests pin the exact distributions;
// these pin that the proxy feeds each policy what it needs (weights,
// in-flight counts, latencies, hash keys, load reports).

func policyYAML(balance string, targets ...string) string {
	return upstreamYAML("    balance: "+balance+"\n", targets...)
}

// hit sends n sequential GETs with the given header and returns who
// answered each.
func hit(t *testing.T, url string, n int, header map[string]string) []string {
	t.Helper()
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		resp, body := doGet(t, url, header)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		out = append(out, body)
	}
	return out
}

func count(xs []string) map[string]int {
	m := map[string]int{}
	for _, x := range xs {
		m[x]++
	}
	return m
}

func TestPolicyWeightedRoundRobinIsSmooth(t *testing.T) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	p := startProxy(t, policyYAML("{policy: weighted_round_robin}",
		"{address: "+a.addr()+", weight: 5}", "{address: "+b.addr()+"}", "{address: "+c.addr()+"}"))
	got := strings.Join(hit(t, p.url("web")+"/", 14, nil), "")
	if got != "aabacaaaabacaa" {
		t.Fatalf("sequence %q, want nginx's smooth order aabacaa twice", got)
	}
}

func TestPolicyRandomReachesEveryEndpoint(t *testing.T) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	p := startProxy(t, policyYAML("{policy: random}", "{address: "+a.addr()+"}", "{address: "+b.addr()+"}", "{address: "+c.addr()+"}"))
	n := count(hit(t, p.url("web")+"/", 300, nil))
	// Expected 100 each; 50 is more than 7 standard deviations away.
	for _, k := range []string{"a", "b", "c"} {
		if n[k] < 50 {
			t.Fatalf("shares %v: %s got too few", n, k)
		}
	}
}

func TestPolicyWeightedRandomFollowsWeights(t *testing.T) {
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	p := startProxy(t, policyYAML("{policy: weighted_random}", "{address: "+a.addr()+", weight: 3}", "{address: "+b.addr()+"}"))
	n := count(hit(t, p.url("web")+"/", 400, nil))
	// Expected 300:100; the bounds are 7 standard deviations.
	if n["a"] < 240 || n["a"] > 360 {
		t.Fatalf("shares %v, want about 300:100", n)
	}
}

// busyBackend holds every request to /hold until release is closed (or
// the proxy lets go of it, as when a failed test shuts the proxy down).
func busyBackend(t *testing.T, name string, entered chan<- struct{}, release <-chan struct{}) *backend {
	return newBackend(t, name, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, name)
	})
}

// testAvoidsBusyEndpoint holds one request on backend "busy" and checks
// that the policy sends nothing else there while it is in flight.
func testAvoidsBusyEndpoint(t *testing.T, policy string) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	busy := busyBackend(t, "busy", entered, release)
	x, y := newBackend(t, "x", nil), newBackend(t, "y", nil)
	p := startProxy(t, policyYAML("{policy: "+policy+"}", "{address: "+busy.addr()+"}", "{address: "+x.addr()+"}", "{address: "+y.addr()+"}"))
	// Warm every endpoint so none is "never tried" (p2c_ewma tries those).
	hit(t, p.url("web")+"/", 6, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Reaches busy once the idle ones hold more in-flight than it:
		// send /hold until busy has it.
		for {
			resp, err := http.Get(p.url("web") + "/hold")
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) == "busy" {
				return
			}
		}
	}()
	<-entered
	n := count(hit(t, p.url("web")+"/", 40, nil))
	close(release)
	wg.Wait()
	if n["busy"] != 0 {
		t.Fatalf("%s sent %d of 40 requests to the endpoint with one in flight while the others had none: %v", policy, n["busy"], n)
	}
}

func TestPolicyLeastConnAvoidsBusyEndpoint(t *testing.T) { testAvoidsBusyEndpoint(t, "least_conn") }
func TestPolicyP2CAvoidsBusyEndpoint(t *testing.T)       { testAvoidsBusyEndpoint(t, "p2c") }

func TestPolicyP2CEWMAAvoidsSlowEndpoint(t *testing.T) {
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(30 * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		io.WriteString(w, "slow")
	})
	x, y := newBackend(t, "x", nil), newBackend(t, "y", nil)
	p := startProxy(t, policyYAML("{policy: p2c_ewma}", "{address: "+slow.addr()+"}", "{address: "+x.addr()+"}", "{address: "+y.addr()+"}"))
	n := count(hit(t, p.url("web")+"/", 200, nil))
	// Round robin would give it 67. Once its latency is known, any pair
	// with the slow endpoint in it picks the other.
	if n["slow"] > 10 {
		t.Fatalf("p2c_ewma sent %d of 200 requests to an endpoint 100x slower: %v", n["slow"], n)
	}
}

func testHashPolicy(t *testing.T, policy string) {
	a, b, c := newBackend(t, "a", nil), newBackend(t, "b", nil), newBackend(t, "c", nil)
	p := startProxy(t, policyYAML("{policy: "+policy+", hash_key: header:X-User-Id}", "{address: "+a.addr()+"}", "{address: "+b.addr()+"}", "{address: "+c.addr()+"}"))
	owners := map[string]bool{}
	for u := 0; u < 30; u++ {
		user := fmt.Sprintf("user-%d", u)
		got := count(hit(t, p.url("web")+"/", 5, map[string]string{"X-User-Id": user}))
		if len(got) != 1 {
			t.Fatalf("%s: key %s went to %v; a key must stick to one endpoint", policy, user, got)
		}
		for k := range got {
			owners[k] = true
		}
	}
	if len(owners) != 3 {
		t.Fatalf("%s: 30 keys landed on %d endpoints, want all 3", policy, len(owners))
	}
	// Without the key the request falls back to round robin.
	if n := count(hit(t, p.url("web")+"/", 9, nil)); n["a"] != 3 || n["b"] != 3 || n["c"] != 3 {
		t.Fatalf("%s: keyless requests %v, want round robin", policy, n)
	}
}

func TestPolicyConsistentHashByHeader(t *testing.T) { testHashPolicy(t, "consistent_hash") }
func TestPolicyMaglevByHeader(t *testing.T)         { testHashPolicy(t, "maglev") }

func TestPolicyDynamicWeightFollowsReportedLoad(t *testing.T) {
	loaded := newBackend(t, "loaded", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Switchboard-Load", "cpu=0.9, mem=0.9")
		io.WriteString(w, "loaded")
	})
	idle := newBackend(t, "idle", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Switchboard-Load", "cpu=0.1, mem=0.1")
		io.WriteString(w, "idle")
	})
	p := startProxy(t, policyYAML("{policy: dynamic_weight, dynamic_weight: {refresh: 20ms}}", "{address: "+loaded.addr()+"}", "{address: "+idle.addr()+"}"))
	// Scores: loaded 0.4*0.1+0.3*0.1+0.2+0.1 = 0.37, idle 0.4*0.9+0.3*0.9+0.2+0.1
	// = 0.93: the loaded endpoint's share settles near 0.37/1.30 = 28%.
	// Traffic carries the reports; keep sending until a refresh has used
	// them (bounded), then measure.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := count(hit(t, p.url("web")+"/", 200, nil))
		share := float64(n["loaded"]) / 200
		if share < 0.40 && share > 0.15 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loaded endpoint's share stayed %.2f (want about 0.28): %v", share, n)
		}
	}
}
