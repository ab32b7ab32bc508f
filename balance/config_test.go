package balance

import (
	"strings"
	"testing"
	"time"
)

func TestEveryPolicyIsRegistered(t *testing.T) {
	want := []string{ConsistentHashName, DynamicWeightName, LeastConnName, MaglevName, P2CName, P2CEWMAName, RandomName, RoundRobinName, WeightedRandomName, WeightedRoundRobinName}
	if got := Policies(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Policies() = %v, want %v", got, want)
	}
	for _, p := range want {
		if err := testConfig(p).Validate(); err != nil {
			t.Errorf("%s: the minimal config is invalid: %v", p, err)
		}
	}
}

func TestConfigErrorsSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: "fastest"}, `unknown balance policy "fastest"`},
		{Config{Policy: ConsistentHashName}, "consistent_hash needs hash_key"},
		{Config{Policy: MaglevName}, "maglev needs hash_key"},
		{Config{Policy: ConsistentHashName, HashKey: "header"}, "header needs a name"},
		{Config{Policy: ConsistentHashName, HashKey: "body:x"}, "want header:NAME, cookie:NAME, client_ip, path or query:NAME"},
		{Config{Policy: ConsistentHashName, HashKey: "path", BoundedLoad: 1}, "bounded_load must be > 1"},
		{Config{Policy: ConsistentHashName, HashKey: "path", BoundedLoad: 0.8}, "bounded_load must be > 1"},
		{Config{Policy: ConsistentHashName, HashKey: "path", VirtualNodes: -1}, "virtual_nodes must be positive"},
		{Config{Policy: ConsistentHashName, HashKey: "path", Fallback: MaglevName}, `fallback "maglev" is not one of`},
		{Config{Policy: ConsistentHashName, HashKey: "path", Fallback: "nope"}, `fallback "nope" is not one of`},
		{Config{Policy: MaglevName, HashKey: "path", TableSize: 65536}, "table_size 65536 is not prime (try 65537)"},
		{Config{Policy: MaglevName, HashKey: "path", TableSize: -7}, "table_size must be between"},
		{Config{Policy: MaglevName, HashKey: "path", SlowStart: time.Second}, "maglev does not support slow_start"},
		{Config{Policy: MaglevName, HashKey: "path", VirtualNodes: 10}, "maglev does not use virtual_nodes"},
		{Config{Policy: RoundRobinName, SlowStart: time.Second}, "round_robin does not use slow_start"},
		{Config{Policy: RandomName, HashKey: "path"}, "random does not use hash_key"},
		{Config{Policy: LeastConnName, TableSize: 65537}, "least_conn does not use table_size"},
		{Config{Policy: P2CName, DecayWindow: time.Second}, "p2c does not use decay_window"},
		{Config{Policy: WeightedRoundRobinName, SlowStart: -time.Second}, "slow_start must not be negative"},
		{Config{Policy: P2CEWMAName, ErrorPenalty: -time.Second}, "error_penalty must not be negative"},
		{Config{Policy: WeightedRandomName, DynamicWeight: DynamicWeightConfig{CPU: 1}}, "weighted_random does not use dynamic_weight"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{CPU: -1}}, "coefficient cpu must be >= 0"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{ErrorCap: 2}}, "error_cap must be in (0, 1]"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{MinWeight: 1.5}}, "min_weight must be in (0, 1]"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{Header: "X Load"}}, `header "X Load" is not a valid header name`},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{PollPath: "load"}}, "poll_path must start with /"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{PollInterval: time.Second}}, "poll_interval needs poll_path"},
		{Config{Policy: DynamicWeightName, DynamicWeight: DynamicWeightConfig{LatencyCap: -1}}, "latency_cap must be positive"},
		{Config{Policy: DynamicWeightName, HashKey: "path"}, "dynamic_weight does not use hash_key"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
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
