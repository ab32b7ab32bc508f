package config

import (
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/registryd"
)

// The defaults that Parse fills in, as documented on the fields in
// types.go and in docs/configuration.md. They live here only.
const (
	DefaultAdminListen     = "127.0.0.1:9901"
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultShutdownTimeout = Duration(15 * time.Second)

	DefaultListenerProtocol  = "http"
	DefaultReadHeaderTimeout = Duration(10 * time.Second)
	DefaultClientIdleTimeout = Duration(60 * time.Second)
	DefaultReadBodyTimeout   = Duration(30 * time.Second)
	DefaultMaxHeaderBytes    = 64 * KiB

	DefaultRouteTimeout = Duration(60 * time.Second)
	DefaultPathPrefix   = "/"
	DefaultBufferMemory = 64 * KiB
	DefaultBufferMax    = 8 * MiB

	DefaultBalancePolicy          = balance.DefaultPolicy
	DefaultUpstreamProtocol       = "http1"
	DefaultMaxIdlePerEndpoint     = 64
	DefaultUpstreamIdleTimeout    = Duration(60 * time.Second)
	DefaultMaxResponseHeaderBytes = 64 * KiB
	DefaultConnectTimeout         = Duration(2 * time.Second)
	DefaultResponseHeaderTimeout  = Duration(30 * time.Second)
	DefaultWeight                 = 1

	DefaultRegistryListen       = "127.0.0.1:8500"
	DefaultRegistryMaxBodyBytes = 1 * MiB
	// DefaultRegistryMaxStateBytes is registryd's default (see
	// registryd.DefaultMaxStateBytes for why this size).
	DefaultRegistryMaxStateBytes = Size(registryd.DefaultMaxStateBytes)
	DefaultEmptyGrace            = Duration(30 * time.Second)

	DefaultTCPIdleTimeout  = Duration(10 * time.Minute)
	DefaultConnectAttempts = 3
	DefaultTCPQueueTimeout = Duration(time.Second)
)

// MaxWeight is the largest target weight.
const MaxWeight = 10000

// applyDefaults fills in every setting left unset in a valid cfg. A zero
// Duration or Size counts as unset; pointer fields are unset only when
// nil, which is how an explicit 0 (a route timeout, max idle connections)
// survives.
//
// The library configs (balance, health, breaker, retry, fallback, rate
// limits) are left as written: their zero fields mean the library's own
// defaults, which it applies when it builds. Only the balance policy is
// named, with the library's default, so that the loaded config (and the
// admin API) says which policy runs.
func applyDefaults(cfg *Config) {
	a := &cfg.Admin
	setDefault(&a.Listen, DefaultAdminListen)
	if a.Enabled == nil {
		a.Enabled = ptr(true)
	}
	setDefault(&cfg.Log.Level, DefaultLogLevel)
	setDefault(&cfg.Log.Format, DefaultLogFormat)
	setDefault(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	applyTracingDefaults(cfg.Tracing)

	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		setDefault(&l.Protocol, DefaultListenerProtocol)
		setDefault(&l.Timeouts.ReadHeader, DefaultReadHeaderTimeout)
		if l.TLS != nil && l.TLS.ACME != nil {
			setDefault(&l.TLS.ACME.Directory, DefaultACMEDirectory)
		}
		if l.Protocol == "tcp" {
			setDefault(&l.Timeouts.Idle, DefaultTCPIdleTimeout)
			setDefault(&l.ConnectAttempts, DefaultConnectAttempts)
			if l.Queue != nil {
				setDefault(&l.Queue.Timeout, DefaultTCPQueueTimeout)
			}
			continue
		}
		setDefault(&l.Timeouts.Idle, DefaultClientIdleTimeout)
		setDefault(&l.Timeouts.ReadBody, DefaultReadBodyTimeout)
		setDefault(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
		applyTLSDefaults(l)
		for j := range l.Routes {
			r := &l.Routes[j]
			setDefault(&r.Name, l.Name+"/"+strconv.Itoa(j))
			if r.Timeout == nil {
				r.Timeout = ptr(DefaultRouteTimeout)
			}
			setDefault(&r.Match.PathPrefix, DefaultPathPrefix)
			if b := r.BufferRequests; b != nil {
				setDefault(&b.Memory, DefaultBufferMemory)
				setDefault(&b.Max, DefaultBufferMax)
			}
			defaultCompress(r)
			trafficDefaults(r)
			applyAccessDefaults(r)
			applyRedirectDefaults(r)
		}
	}

	if r := cfg.Registry; r != nil {
		if r.Enabled == nil {
			r.Enabled = ptr(true)
		}
		setDefault(&r.Listen, DefaultRegistryListen)
		setDefault(&r.MaxBodyBytes, DefaultRegistryMaxBodyBytes)
		setDefault(&r.MaxStateBytes, DefaultRegistryMaxStateBytes)
	}
	setDefault(&cfg.Discovery.EmptyGrace, DefaultEmptyGrace)

	for _, u := range cfg.Upstreams {
		if d := u.Discovery; d != nil && d.PassingOnly == nil {
			d.PassingOnly = ptr(true)
		}
		setDefault(&u.Balance.Policy, DefaultBalancePolicy)
		if u.TLS != nil {
			setDefault(&u.Protocol, ProtocolHTTPS)
		}
		setDefault(&u.Protocol, DefaultUpstreamProtocol)
		if u.Health.Passive == nil {
			u.Health.Passive = DefaultPassive()
		}
		if u.MaxIdlePerEndpoint == nil {
			u.MaxIdlePerEndpoint = ptr(DefaultMaxIdlePerEndpoint)
		}
		setDefault(&u.IdleTimeout, DefaultUpstreamIdleTimeout)
		setDefault(&u.MaxResponseHeaderBytes, DefaultMaxResponseHeaderBytes)
		setDefault(&u.Timeouts.Connect, DefaultConnectTimeout)
		setDefault(&u.Timeouts.ResponseHeader, DefaultResponseHeaderTimeout)
		stickyCookieDefaults(u.StickyCookie)
		for i := range u.Targets {
			setDefault(&u.Targets[i].Weight, DefaultWeight)
		}
	}
}

// DefaultPassive is the passive ejection of an upstream whose health
// block leaves it out: a dead endpoint must not take a connect attempt of
// every request forever (nginx marks a server down after one failure for
// 10s by default). More patient than nginx: three failed connects or
// broken exchanges in a row (no HTTP status counts) eject an endpoint for
// 10s, the k-th time for k times as long up to 5m, and at most half of the
// pool is out at once. `health: {passive: {enabled: false}}` turns it off.
func DefaultPassive() *health.PassiveConfig {
	return &health.PassiveConfig{ConsecutiveFailures: 3, FailureStatuses: []int{}, BaseEjection: 10 * time.Second}
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

func ptr[T any](v T) *T { return &v }
