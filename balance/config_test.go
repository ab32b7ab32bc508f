package balance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// TestEveryPolicyIsRegistered: Policies lists the built-in policies and
// the one the example registers, sorted.
func TestEveryPolicyIsRegistered(t *testing.T) {
	want := append(slices.Clone(builtinPolicies), "primary_backup")
	slices.Sort(want)
	if got := Policies(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Policies() = %v, want %v", got, want)
	}
	for _, p := range builtinPolicies {
		if err := testConfig(p).Validate(); err != nil {
			t.Errorf("%s: the minimal config is invalid: %v", p, err)
		}
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	known := strings.Join(Policies(), ", ")
	for _, tc := range []struct {
		cfg  Config
		want string // the whole error, "PATH: problem"
	}{
		{Config{Policy: "fastest"}, `policy: "fastest" is unknown (known: ` + known + `)`},
		{Config{Policy: ConsistentHashName}, "hash_key: required by consistent_hash (header:NAME, cookie:NAME, client_ip, path or query:NAME)"},
		{Config{Policy: MaglevName}, "hash_key: required by maglev (header:NAME, cookie:NAME, client_ip, path or query:NAME)"},
		{Config{Policy: ConsistentHashName, HashKey: "header"}, `hash_key: "header" needs a name, as in header:NAME`},
		{Config{Policy: ConsistentHashName, HashKey: "body:x"}, `hash_key: "body:x" is unknown: want header:NAME, cookie:NAME, client_ip, path or query:NAME`},
		{Config{Policy: ConsistentHashName, HashKey: "path", BoundedLoad: 1}, "bounded_load: must be > 1 (1.25 is a good start), got 1"},
		{Config{Policy: ConsistentHashName, HashKey: "path", BoundedLoad: 0.8}, "bounded_load: must be > 1 (1.25 is a good start), got 0.8"},
		{Config{Policy: ConsistentHashName, HashKey: "path", VirtualNodes: -1}, "virtual_nodes: must be positive, got -1"},
		{Config{Policy: ConsistentHashName, HashKey: "path", Fallback: MaglevName}, `fallback: "maglev" is not one of round_robin, weighted_round_robin, random, weighted_random, least_conn, p2c, p2c_ewma`},
		{Config{Policy: ConsistentHashName, HashKey: "path", Fallback: "nope"}, `fallback: "nope" is not one of round_robin, weighted_round_robin, random, weighted_random, least_conn, p2c, p2c_ewma`},
		{Config{Policy: MaglevName, HashKey: "path", TableSize: 65536}, "table_size: 65536 is not prime (try 65537)"},
		{Config{Policy: MaglevName, HashKey: "path", TableSize: -7}, "table_size: must be between 2 and 16777213, got -7"},
		{Config{Policy: MaglevName, HashKey: "path", SlowStart: time.Second}, "slow_start: not supported by maglev: every weight change rebuilds the table and moves keys between unrelated endpoints (use consistent_hash)"},
		{Config{Policy: MaglevName, HashKey: "path", VirtualNodes: 10}, "virtual_nodes: not used by maglev"},
		{Config{Policy: ConsistentHashName, HashKey: "path", Hash: "sha1"}, `hash: "sha1" is not one of fnv1a, md5`},
		{Config{Policy: MaglevName, HashKey: "path", Hash: HashMD5}, "hash: not used by maglev"},
		{Config{Policy: ConsistentHashName, HashKey: "path", MissingKey: "drop"}, `missing_key: "drop" is not one of fallback, error`},
		{Config{Policy: MaglevName, HashKey: "path", MissingKey: MissingKeyError, Fallback: RandomName}, "fallback: not used with missing_key: error (a request without a key is refused)"},
		{Config{Policy: RoundRobinName, MissingKey: MissingKeyError}, "missing_key: not used by round_robin"},
		{Config{Policy: RoundRobinName, SlowStart: time.Second}, "slow_start: not used by round_robin"},
		{Config{SlowStart: time.Second}, "slow_start: not used by round_robin"}, // the default policy
		{Config{Policy: RandomName, HashKey: "path"}, "hash_key: not used by random"},
		{Config{Policy: LeastConnName, TableSize: 65537}, "table_size: not used by least_conn"},
		{Config{Policy: P2CName, DecayWindow: time.Second}, "decay_window: not used by p2c"},
		{Config{Policy: WeightedRoundRobinName, SlowStart: -time.Second}, "slow_start: must not be negative, got -1s"},
		{Config{Policy: P2CEWMAName, ErrorPenalty: -time.Second}, "error_penalty: must not be negative, got -1s"},
		{Config{Policy: WeightedRandomName, DynamicWeight: DynamicWeightConfig{CPU: 1}}, "dynamic_weight: not used by weighted_random"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{CPU: -1}}, "dynamic_weight.cpu: must be >= 0, got -1"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{ErrorCap: 2}}, "dynamic_weight.error_cap: must be in (0, 1], got 2"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{MinWeight: 1.5}}, "dynamic_weight.min_weight: must be in (0, 1], got 1.5"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Header: "X Load"}}, `dynamic_weight.header: "X Load" is not a valid header name`},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{PollPath: "load"}}, `dynamic_weight.poll_path: must start with /, got "load"`},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{PollInterval: time.Second}}, "dynamic_weight.poll_interval: needs poll_path"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{LatencyCap: -1}}, "dynamic_weight.latency_cap: must be positive, got -1ns"},
		{Config{Policy: DynamicWeightName, HashKey: "path"}, "hash_key: not used by dynamic_weight"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"queue_depth": {}}}}, "dynamic_weight.factors.queue_depth.coefficient: must be > 0, got 0"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"queue_depth": {Coefficient: 1, Max: -5}}}}, "dynamic_weight.factors.queue_depth.max: must be > 0, got -5"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"inventory": {Coefficient: 1, Prefer: "more"}}}}, `dynamic_weight.factors.inventory.prefer: "more" is not one of low, high`},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"Queue-Depth": {Coefficient: 1}}}}, `dynamic_weight.factors: "Queue-Depth" is not a valid factor name: lower-case letters, digits and _, starting with a letter, at most 32 bytes`},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"cpu": {Coefficient: 1}}}}, `dynamic_weight.factors: "cpu" is built in: set dynamic_weight.cpu instead`},
		{Config{Policy: P2CName, DynamicWeight: DynamicWeightConfig{Factors: map[string]DynamicFactor{"q": {Coefficient: 1}}}}, "dynamic_weight: not used by p2c"},
	} {
		err := tc.cfg.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("Validate(%+v)\n got %v\nwant %s", tc.cfg, err, tc.want)
			continue
		}
		var fe *field.Error
		if !errors.As(err, &fe) || !strings.HasPrefix(tc.want, fe.Path+": ") {
			t.Errorf("Validate(%+v) = %#v, want a *field.Error whose path starts the message", tc.cfg, err)
		}
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	err := Config{Policy: MaglevName, HashKey: "body:x", BoundedLoad: 0.5, TableSize: 10, VirtualNodes: 3}.Validate()
	var paths []string
	for _, e := range field.Split(err) {
		paths = append(paths, e.Path)
	}
	if got, want := strings.Join(paths, " "), "virtual_nodes table_size hash_key bounded_load"; got != want {
		t.Errorf("Validate reported %q, want every problem: %q\n%v", got, want, err)
	}
}

func TestEmptyPolicyIsRoundRobin(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*RoundRobin); !ok {
		t.Errorf("New(Config{}) = %T, want the default policy, round_robin", b)
	}
}

func TestConfigDefaults(t *testing.T) {
	ch, err := NewConsistentHash(Config{Policy: ConsistentHashName, HashKey: "cookie:sid"})
	if err != nil {
		t.Fatal(err)
	}
	if ch.vn != DefaultVirtualNodes {
		t.Errorf("virtual_nodes default %d, want %d", ch.vn, DefaultVirtualNodes)
	}
	if _, ok := ch.h.fallback.(*RoundRobin); !ok {
		t.Errorf("fallback default %T, want round_robin", ch.h.fallback)
	}
	mg, err := NewMaglev(Config{Policy: MaglevName, HashKey: "client_ip"})
	if err != nil {
		t.Fatal(err)
	}
	if mg.m != DefaultTableSize {
		t.Errorf("table_size default %d, want %d", mg.m, DefaultTableSize)
	}
	e := NewP2CEWMA(Config{})
	if e.p.tau != float64(10*time.Second) || e.p.penalty != float64(time.Second) {
		t.Errorf("p2c_ewma defaults: decay %v, penalty %v; want 10s, 1s", time.Duration(e.p.tau), time.Duration(e.p.penalty))
	}
	d, err := NewDynamicWeight(Config{Policy: DynamicWeightName})
	if err != nil {
		t.Fatal(err)
	}
	p := d.p
	if p.cpu != 0.4 || p.mem != 0.3 || p.lat != 0.2 || p.errs != 0.1 || p.latCap != float64(time.Second) ||
		p.errCap != 0.5 || p.minW != 0.1 || p.header != "X-Switchboard-Load" || p.refresh != time.Second || p.pollPath != "" {
		t.Errorf("dynamic_weight defaults: %+v", *p)
	}
	d, _ = NewDynamicWeight(Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{CPU: 3, Errors: 1}})
	if d.p.cpu != 0.75 || d.p.errs != 0.25 || d.p.mem != 0 || d.p.lat != 0 {
		t.Errorf("coefficients 3,0,0,1 normalise to %v %v %v %v, want 0.75 0 0 0.25", d.p.cpu, d.p.mem, d.p.lat, d.p.errs)
	}
}

// TestRegisterPanicsOnAClash: a second policy under a taken name, an empty
// name or a nil Builder is a programming error, and changes nothing.
func TestRegisterPanicsOnAClash(t *testing.T) {
	build := func(Config) (Balancer, error) { return NewRoundRobin(), nil }
	for _, tc := range []struct {
		name string
		b    Builder
	}{{RoundRobinName, build}, {"", build}, {"mine", nil}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, %v) did not panic", tc.name, tc.b != nil)
				}
			}()
			Register(tc.name, tc.b)
		}()
	}
	if slices.Contains(Policies(), "mine") || slices.Contains(Policies(), "") {
		t.Fatalf("a refused registration is listed: %v", Policies())
	}
}
