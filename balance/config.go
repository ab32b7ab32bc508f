package balance

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// Defaults for the Config fields that policies read. A zero field means the
// default.
const (
	DefaultPolicy          = RoundRobinName       // policy of a Config without one
	DefaultVirtualNodes    = 160                  // consistent_hash ring points per unit of weight
	DefaultMD5VirtualNodes = 150                  // the same with hash: md5, as the Python ring has
	DefaultTableSize       = 65537                // maglev lookup table size (prime)
	DefaultFallback        = RoundRobinName       // policy for requests without a hash key
	DefaultDecayWindow     = 10 * time.Second     // p2c_ewma and dynamic_weight EWMA time constant
	DefaultErrorPenalty    = time.Second          // latency an error counts as in p2c_ewma
	DefaultLoadHeader      = "X-Switchboard-Load" // response header carrying a load report
	DefaultRefresh         = time.Second          // dynamic_weight weight-table refresh period
	DefaultPollInterval    = 5 * time.Second      // dynamic_weight poll period when PollPath is set
	DefaultLatencyCap      = time.Second          // dynamic_weight: latency that scores 0
	DefaultErrorCap        = 0.5                  // dynamic_weight: error rate that scores 0
	DefaultMinWeight       = 0.1                  // dynamic_weight: floor of an endpoint's score
)

// Config is a policy's configuration, validated by the policy's Builder.
// The yaml tags are the keys of an upstream's `balance:` block, and the
// field comments are their reference (docs/balancing.md says which policy
// reads which key). A field a policy does not read must be left zero:
// setting it is an error, so that a misplaced key is caught at load time
// instead of silently ignored. Validate and New report every problem as a
// *field.Error naming the key ("hash_key", "dynamic_weight.cpu").
type Config struct {
	// Policy is the registered name of the policy. Default round_robin
	// (DefaultPolicy).
	Policy string `yaml:"policy"`

	// HashKey says where consistent_hash and maglev find a request's key:
	// header:NAME, cookie:NAME, client_ip, path or query:NAME (see
	// ParseHashKey). Required by those two policies.
	HashKey string `yaml:"hash_key"`
	// BoundedLoad, when set, caps any endpoint of consistent_hash or maglev
	// at BoundedLoad times its weighted share of the in-flight requests
	// ("consistent hashing with bounded loads"); a key whose endpoint is
	// full goes to the next one along the ring or table. Must be > 1;
	// 1.25 is a good start. Default 0: off.
	BoundedLoad float64 `yaml:"bounded_load"`
	// MissingKey says what consistent_hash and maglev do with a request
	// that has no hash key: "fallback" hands it to Fallback (the default);
	// "error" refuses it, Pick returning ErrNoHashKey, which the HTTP proxy
	// answers with 400 hash_key_missing. With "error", Fallback must be
	// left unset.
	MissingKey string `yaml:"missing_key"`
	// Fallback is the policy for requests without a hash key
	// (consistent_hash, maglev). Default round_robin. It may not be a
	// hashing policy or dynamic_weight.
	Fallback string `yaml:"fallback"`
	// TableSize is maglev's lookup table size; it must be prime and should
	// be at least 100 times the number of endpoints. Default 65537.
	TableSize int `yaml:"table_size"`
	// VirtualNodes is the number of consistent_hash ring points per unit of
	// weight. Default 160, or 150 with hash: md5. The ring is capped at
	// 2^20 points in total.
	VirtualNodes int `yaml:"virtual_nodes"`
	// Hash is consistent_hash's hash function: "fnv1a" (the default:
	// FNV-1a 64 with a MurmurHash3 finalizer, points placed by address) or
	// "md5", the ring of the Python services our users run: points keyed
	// "{id}_vn{i}" by endpoint ID (Endpoint.ID), 128-bit MD5 positions, so
	// that Go and Python callers send a key to the same node
	// (docs/balancing.md, "Compatibility with the Python ring").
	Hash string `yaml:"hash"`

	// SlowStart ramps a new or recovered endpoint from 10% to its full
	// weight over this long. Default 0: off. Read by weighted_round_robin,
	// weighted_random, least_conn, p2c, p2c_ewma, dynamic_weight and
	// consistent_hash.
	SlowStart time.Duration `yaml:"slow_start"`

	// DecayWindow is the time constant of the latency and error-rate EWMAs
	// of p2c_ewma and dynamic_weight: an observation's influence falls to
	// 1/e after this long. Default 10s.
	DecayWindow time.Duration `yaml:"decay_window"`
	// ErrorPenalty is the latency that a failed request counts as in
	// p2c_ewma (when its real latency was lower). Default 1s.
	ErrorPenalty time.Duration `yaml:"error_penalty"`

	// DynamicWeight configures dynamic_weight.
	DynamicWeight DynamicWeightConfig `yaml:"dynamic_weight"`
}

// DynamicWeightConfig configures dynamic_weight. An endpoint's score is
//
//	CPU*(1-cpu) + Mem*(1-mem) + Latency*(1-min(lat,LatencyCap)/LatencyCap)
//	  + Errors*(1-min(errs,ErrorCap)/ErrorCap) + the Factors' terms
//
// divided by the sum of the coefficients of its terms and floored at
// MinWeight; its weight is the configured weight times that score. A custom
// factor the endpoint's latest report lacks has no term: its coefficient
// leaves the sum too, so the factor neither helps nor hurts the endpoint.
type DynamicWeightConfig struct {
	// CPU, Mem, Latency and Errors are the coefficients of the score's
	// terms, relative to each other (they need not sum to 1). When all four
	// are zero the defaults 0.4, 0.3, 0.2 and 0.1 apply; when any is set
	// they are taken as given.
	CPU     float64 `yaml:"cpu"`
	Mem     float64 `yaml:"mem"`
	Latency float64 `yaml:"latency"`
	Errors  float64 `yaml:"errors"`
	// LatencyCap is the latency EWMA at which the latency term reaches 0.
	// Default 1s.
	LatencyCap time.Duration `yaml:"latency_cap"`
	// ErrorCap is the error rate (0..1, decayed over DecayWindow) at which
	// the errors term reaches 0. Default 0.5.
	ErrorCap float64 `yaml:"error_cap"`
	// MinWeight is the floor of the score (0..1], so that a loaded endpoint
	// still gets a trickle of traffic and can show it recovered. Default 0.1.
	MinWeight float64 `yaml:"min_weight"`
	// Header is the response header the proxy reads a load report from
	// ("cpu=0.42, mem=0.31") and hands over in Outcome.LoadReport; the
	// poller reads it too. Default X-Switchboard-Load.
	Header string `yaml:"header"`
	// PollPath, when set, makes Run poll http://ADDRESS+PollPath on every
	// ready endpoint; the report is the Header response header or, without
	// it, the body. Default "": no polling.
	PollPath string `yaml:"poll_path"`
	// PollInterval is the time between polls. Default 5s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// Refresh is how often the weight table is rebuilt from the latest
	// reports and observations. Default 1s.
	Refresh time.Duration `yaml:"refresh"`
	// Factors are custom terms of the score, by the name the load report
	// gives them ("cpu=0.4, queue_depth=17" reports queue_depth). A name is
	// lower-case letters, digits and _, starting with a letter, at most 32
	// bytes, and not cpu, mem, latency or errors; at most 16 factors.
	Factors map[string]DynamicFactor `yaml:"factors"`
}

// DynamicFactor is a custom term of dynamic_weight's score. Its reported
// value v (a decimal >= 0) is normalised to min(v, Max)/Max, a fraction
// in [0, 1]; with Prefer "low" the term is Coefficient*(1-fraction), with
// "high" Coefficient*fraction.
type DynamicFactor struct {
	// Coefficient weighs the term against the others (cpu, mem, latency,
	// errors and the other factors), as their coefficients do. Required,
	// > 0.
	Coefficient float64 `yaml:"coefficient"`
	// Max is the value at which the factor is at its worst (Prefer low) or
	// best (Prefer high); higher values count as Max. Default 1: the value
	// is a fraction already.
	Max float64 `yaml:"max"`
	// Prefer says which values are better: "low" (the default: a queue
	// depth, a load) or "high" (stock on hand, free slots).
	Prefer string `yaml:"prefer"`
}

// isZero reports whether c sets nothing.
func (c DynamicWeightConfig) isZero() bool {
	if len(c.Factors) > 0 {
		return false
	}
	c.Factors = nil
	return reflect.ValueOf(c).IsZero()
}

// setting is a Config key and whether it is set.
type setting struct {
	key string
	set bool
}

func (c Config) settings() []setting {
	dw := c.DynamicWeight
	return []setting{
		{"hash_key", c.HashKey != ""},
		{"bounded_load", c.BoundedLoad != 0},
		{"missing_key", c.MissingKey != ""},
		{"fallback", c.Fallback != ""},
		{"table_size", c.TableSize != 0},
		{"virtual_nodes", c.VirtualNodes != 0},
		{"hash", c.Hash != ""},
		{"slow_start", c.SlowStart != 0},
		{"decay_window", c.DecayWindow != 0},
		{"error_penalty", c.ErrorPenalty != 0},
		{"dynamic_weight", !dw.isZero()},
	}
}

// Unused reports every key set in c that is not among keys, each as a
// *field.Error "KEY: not used by POLICY", joined. A Builder of one's own
// policy calls it with the keys the policy reads (none: Unused()), so that
// a misplaced key is an error, as it is for the built-in policies.
func (c Config) Unused(keys ...string) error { return c.unused(keys...) }

// unused reports every key set in c that the policy, which reads keys, does
// not read.
func (c Config) unused(keys ...string) error {
	var errs []error
	for _, s := range c.settings() {
		if s.set && !slices.Contains(keys, s.key) {
			errs = append(errs, field.Errorf(s.key, "not used by %s", c.Policy))
		}
	}
	return errors.Join(errs...)
}

// negative reports each of the durations keys names (slow_start,
// decay_window, error_penalty) that is negative.
func (c Config) negative(keys ...string) error {
	var errs []error
	for _, k := range keys {
		var d time.Duration
		switch k {
		case "slow_start":
			d = c.SlowStart
		case "decay_window":
			d = c.DecayWindow
		case "error_penalty":
			d = c.ErrorPenalty
		}
		if d < 0 {
			errs = append(errs, field.Errorf(k, "must not be negative, got %v", d))
		}
	}
	return errors.Join(errs...)
}

// check is the whole validation of a policy that reads keys and nothing
// else needs checking: no key it does not read, no negative duration.
func (c Config) check(keys ...string) error {
	return errors.Join(c.unused(keys...), c.negative(keys...))
}

// orDuration returns d, or def when d is zero.
func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// isPrime reports whether n is prime (trial division; n is a table size).
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := 3; d <= int(math.Sqrt(float64(n))); d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// policyList formats names for an error message.
func policyList(names []string) string { return strings.Join(names, ", ") }
