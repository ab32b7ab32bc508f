package ratelimit

import (
	"errors"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// The algorithm names of Config.Algorithm.
const (
	TokenBucketName   = "token_bucket"
	LeakyBucketName   = "leaky_bucket"
	FixedWindowName   = "fixed_window"
	SlidingWindowName = "sliding_window"
)

// Algorithms lists the algorithm names, in the order the docs give them.
func Algorithms() []string {
	return []string{TokenBucketName, LeakyBucketName, FixedWindowName, SlidingWindowName}
}

// The variants of sliding_window (Config.Variant).
const (
	VariantAuto    = "auto"    // log when the limit is small enough, else counter
	VariantLog     = "log"     // SlidingLog: exact, 8 bytes per event in the window
	VariantCounter = "counter" // SlidingWindow: approximate, constant memory
)

// LogMaxLimit is the largest limit for which sliding_window's auto variant
// uses the exact log (8 KB per limiter at most). A keyed limiter uses it
// only while the logs of MaxKeys keys would also stay within keyedLogBudget.
const LogMaxLimit = 1000

// keyedLogBudget bounds the worst-case memory of the logs of a keyed
// sliding_window with variant auto: 64 MiB, so limit <= 83 at the default
// 100k keys.
const keyedLogBudget = 64 << 20

// Config configures one limiter. The yaml tags are the keys of an entry of a
// route's rate_limit list. A field the chosen algorithm does not read must
// be left zero: setting it is an error, so a misplaced key is caught at load
// time instead of silently ignored.
type Config struct {
	// Algorithm is token_bucket, leaky_bucket, fixed_window or
	// sliding_window. Default token_bucket.
	Algorithm string `yaml:"algorithm"`
	// Rate is N/UNIT ("100/s", "5/m", "10/100ms"). Required. For the
	// buckets it is the refill or release rate; for the window algorithms,
	// N per window of UNIT ("100/m": 100 per minute).
	Rate string `yaml:"rate"`
	// Burst is how many requests a full token bucket admits at once.
	// Required by token_bucket (at least 1).
	Burst int `yaml:"burst"`
	// Queue is how many requests a leaky bucket lets wait for their slot
	// in its evenly spaced output. Required by leaky_bucket (at least 1).
	Queue int `yaml:"queue"`
	// MaxWait additionally rejects a leaky-bucket request that would wait
	// longer than this. Default 0: the queue alone bounds the wait, at
	// Queue intervals.
	MaxWait time.Duration `yaml:"max_wait"`
	// Variant chooses sliding_window's implementation: log (exact, 8 bytes
	// per request in the window), counter (approximate, constant memory)
	// or auto. Default auto: log when N is at most 1000 (and, for a keyed
	// limiter, max_keys * N * 8 bytes is at most 64 MiB), else counter.
	Variant string `yaml:"variant"`

	// Key makes the limiter per key: client_ip, header:NAME, path or
	// route. Default: none, one limiter for every request it sees.
	Key string `yaml:"key"`
	// TrustedProxies are the addresses and CIDR prefixes of proxies whose
	// X-Forwarded-For is believed, for key client_ip. Default none: the
	// key is the TCP peer's address.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// MaxKeys bounds the keys remembered, with a key. Default 100000.
	MaxKeys int `yaml:"max_keys"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key.
func (c Config) Validate() error {
	_, err := c.build()
	return err
}

// plan is a validated Config.
type plan struct {
	algorithm string
	rate      Rate
	variant   string
	source    KeySource
	maxKeys   int
	cfg       Config
}

func (c Config) build() (plan, error) {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	p := plan{algorithm: c.Algorithm, cfg: c}
	if p.algorithm == "" {
		p.algorithm = TokenBucketName
	}
	known := false
	for _, a := range Algorithms() {
		known = known || a == p.algorithm
	}
	if !known {
		bad("algorithm", "%q is unknown (known: %s)", c.Algorithm, strings.Join(Algorithms(), ", "))
	}

	rateOK := false
	if c.Rate == "" {
		bad("rate", "required, as N/UNIT like 100/s")
	} else if r, err := ParseRate(c.Rate); err != nil {
		errs = append(errs, err)
	} else {
		p.rate, rateOK = r, true
	}

	// Fields only some algorithms read.
	unused := func(key string, set bool, users ...string) {
		if set && known && !contains(users, p.algorithm) {
			bad(key, "not used by %s (only by %s)", p.algorithm, strings.Join(users, ", "))
		}
	}
	unused("burst", c.Burst != 0, TokenBucketName)
	unused("queue", c.Queue != 0, LeakyBucketName)
	unused("max_wait", c.MaxWait != 0, LeakyBucketName)
	unused("variant", c.Variant != "", SlidingWindowName)

	switch p.algorithm {
	case TokenBucketName:
		if c.Burst < 1 {
			bad("burst", "must be at least 1, got %d", c.Burst)
		} else if rateOK {
			if err := checkTokenBucket(p.rate, c.Burst); err != nil {
				errs = append(errs, err)
			}
		}
	case LeakyBucketName:
		if c.Queue < 1 {
			bad("queue", "must be at least 1, got %d", c.Queue)
		} else if rateOK {
			if err := checkLeakyBucket(p.rate, c.Queue, 0); err != nil {
				errs = append(errs, err)
			}
		}
		if c.MaxWait < 0 {
			bad("max_wait", "must not be negative, got %v", c.MaxWait)
		}
	case SlidingWindowName:
		switch c.Variant {
		case "", VariantAuto, VariantLog, VariantCounter:
		default:
			bad("variant", "%q is unknown (known: auto, log, counter)", c.Variant)
		}
	}

	p.maxKeys = c.MaxKeys
	if c.Key != "" {
		src, err := ParseKeySource(c.Key)
		if err != nil {
			errs = append(errs, err)
		}
		p.source = src
		if p.maxKeys == 0 {
			p.maxKeys = DefaultMaxKeys
		}
	}
	if c.MaxKeys < 0 {
		bad("max_keys", "must be at least 1, got %d", c.MaxKeys)
	} else if c.MaxKeys > 0 && c.Key == "" {
		bad("max_keys", "needs key (client_ip, header:NAME, path or route)")
	}
	if len(c.TrustedProxies) > 0 {
		if p.source.Kind != KeyClientIP {
			bad("trusted_proxies", "needs key client_ip")
		}
		prefixes, err := ParseTrustedProxies(c.TrustedProxies)
		if err != nil {
			errs = append(errs, err)
		}
		p.source.TrustedProxies = prefixes
	}

	p.variant = c.Variant
	if p.algorithm == SlidingWindowName && (p.variant == "" || p.variant == VariantAuto) {
		p.variant = VariantCounter
		if p.rate.N <= LogMaxLimit && (c.Key == "" || int64(p.maxKeys)*int64(p.rate.N)*8 <= keyedLogBudget) {
			p.variant = VariantLog
		}
	}
	return p, errors.Join(errs...)
}

// newLimiter returns a new limiter of the plan's algorithm.
func (p plan) newLimiter() limiter {
	switch p.algorithm {
	case TokenBucketName:
		return NewTokenBucket(p.rate, p.cfg.Burst)
	case LeakyBucketName:
		return NewLeakyBucket(p.rate, p.cfg.Queue, p.cfg.MaxWait)
	case FixedWindowName:
		return NewFixedWindow(p.rate)
	}
	if p.variant == VariantLog {
		return NewSlidingLog(p.rate)
	}
	return NewSlidingWindow(p.rate)
}

// New returns the limiter that c describes, after validating it. It
// ignores the key fields (Key, TrustedProxies, MaxKeys); NewKeyed reads
// them.
func New(c Config) (Limiter, error) {
	p, err := c.build()
	if err != nil {
		return nil, err
	}
	return p.newLimiter(), nil
}

// NewKeyed returns a limiter per key as c describes, after validating it:
// one for every distinct key, up to MaxKeys (see Keyed). Without Key it
// holds one limiter, as with key route.
func NewKeyed(c Config) (*Keyed, error) {
	p, err := c.build()
	if err != nil {
		return nil, err
	}
	if p.source.Kind == "" {
		p.source.Kind = KeyRoute
		p.maxKeys = DefaultMaxKeys
	}
	return newKeyed(p), nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
