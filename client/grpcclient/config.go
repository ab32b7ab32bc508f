package grpcclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/serviceconfig"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/field"
)

// BalancerPrefix starts the gRPC name of every switchboard policy:
// switchboard_round_robin, switchboard_p2c_ewma, ...
const BalancerPrefix = "switchboard_"

// DefaultHashMetadata is the metadata key switchboard_consistent_hash and
// switchboard_maglev read a call's hash key from when hash_key is not set.
const DefaultHashMetadata = "x-switchboard-hash-key"

// BalancerName is the gRPC balancer name of a balance policy:
// BalancerName("p2c_ewma") is "switchboard_p2c_ewma".
func BalancerName(policy string) string { return BalancerPrefix + policy }

// ServiceConfig returns a service config JSON that selects policy with
// cfg (cfg.Policy is ignored), for grpc.WithDefaultServiceConfig:
//
//	{"loadBalancingConfig":[{"switchboard_p2c_ewma":{"decay_window":"5s"}}]}
func ServiceConfig(policy string, cfg balance.Config) string {
	m := jsonValue(reflect.ValueOf(cfg)).(map[string]any)
	delete(m, "policy")
	js, _ := json.Marshal(map[string]any{"loadBalancingConfig": []any{map[string]any{BalancerName(policy): m}}})
	return string(js)
}

// jsonValue renders a balance.Config value the way its YAML reads:
// structs by their yaml keys (zero fields left out), durations as "10s".
func jsonValue(v reflect.Value) any {
	if v.CanInterface() {
		if d, ok := v.Interface().(time.Duration); ok {
			return d.String()
		}
	}
	switch v.Kind() {
	case reflect.Struct:
		m := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if key == "" || key == "-" || !t.Field(i).IsExported() || v.Field(i).IsZero() {
				continue
			}
			m[key] = jsonValue(v.Field(i))
		}
		return m
	case reflect.Map:
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[fmt.Sprint(it.Key().Interface())] = jsonValue(it.Value())
		}
		return m
	case reflect.Slice, reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// lbConfig is a parsed switchboard balancer config.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig
	bal balance.Config
	// hashMD is the metadata key of the call's hash key ("" when the
	// policy does not hash or hashes on the method).
	hashMD string
	// hashMethod: the hash key is the full method name (hash_key: path).
	hashMethod bool
	// loadMD is the trailer key a load report comes in (dynamic_weight).
	loadMD string
	// latency: the policy reads Outcome.Latency, so a pick reads the
	// clock (twice: at the pick and in Done, whose reading the policy then
	// takes from Outcome.At instead of reading the clock itself).
	latency bool
}

// latencyFree are the policies that never read Outcome.Latency. Any other
// (p2c_ewma, dynamic_weight, a policy registered by the program) gets it.
var latencyFree = map[string]bool{
	balance.RoundRobinName: true, balance.WeightedRoundRobinName: true,
	balance.RandomName: true, balance.WeightedRandomName: true,
	balance.LeastConnName: true, balance.P2CName: true,
	balance.ConsistentHashName: true, balance.MaglevName: true,
}

// hashes reports whether policy reads a hash key.
func hashes(policy string) bool {
	return policy == balance.ConsistentHashName || policy == balance.MaglevName
}

// parseConfig reads the JSON of one switchboard_<policy> entry of
// loadBalancingConfig. Its keys are those of the balance block of an
// upstream in the YAML configuration (docs/balancing.md), with durations
// as strings ("10s"); JSON being YAML, the same decoder reads both. An
// unknown key is an error, as in the YAML configuration. hash_key reads
// header:NAME or metadata:NAME (the call's metadata NAME) or path (the
// full method name); empty, it is metadata:x-switchboard-hash-key.
func parseConfig(policy string, js []byte) (*lbConfig, error) {
	name := BalancerName(policy)
	var cfg balance.Config
	if len(bytes.TrimSpace(js)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(js))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("grpcclient: loadBalancingConfig %s: %w", name, err)
		}
	}
	if cfg.Policy != "" && cfg.Policy != policy {
		return nil, fmt.Errorf("grpcclient: loadBalancingConfig %s: %w", name,
			field.Errorf("policy", "is %q but the balancer is %s; leave it out", cfg.Policy, name))
	}
	cfg.Policy = policy
	lc := &lbConfig{latency: !latencyFree[policy]}
	if hashes(policy) || cfg.HashKey != "" { // a policy of the program's own may hash too
		src, nm, _ := strings.Cut(cfg.HashKey, ":")
		switch {
		case cfg.HashKey == "":
			lc.hashMD = DefaultHashMetadata
		case (src == "header" || src == "metadata") && nm != "":
			lc.hashMD = strings.ToLower(nm)
		case cfg.HashKey == "path":
			lc.hashMethod = true
		default:
			return nil, fmt.Errorf("grpcclient: loadBalancingConfig %s: %w", name,
				field.Errorf("hash_key", "%q: a gRPC call is keyed by metadata:NAME (or header:NAME) or path (the method); cookies, queries and client addresses are HTTP's", cfg.HashKey))
		}
		if lc.hashMethod {
			cfg.HashKey = "path"
		} else {
			cfg.HashKey = "header:" + lc.hashMD
		}
	}
	if policy == balance.DynamicWeightName {
		lc.loadMD = strings.ToLower(cfg.DynamicWeight.Header)
		if lc.loadMD == "" {
			lc.loadMD = strings.ToLower(balance.DefaultLoadHeader)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("grpcclient: loadBalancingConfig %s: %w", name, err)
	}
	lc.bal = cfg
	return lc, nil
}

func (c *lbConfig) equal(o *lbConfig) bool {
	return c == o || (o != nil && reflect.DeepEqual(*c, *o))
}
