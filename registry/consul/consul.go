package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/switchboard-dev/switchboard/registry"
)

// Defaults for the zero values of Config.
const (
	DefaultAddress          = "127.0.0.1:8500"
	DefaultWaitTime         = 5 * time.Minute
	MaxWaitTime             = 10 * time.Minute // Consul caps wait at 10m
	DefaultRequestTimeout   = 10 * time.Second
	DefaultMaxResponseBytes = 64 << 20
	DefaultChurnInterval    = 15 * time.Second
	DefaultCheckInterval    = 10 * time.Second
)

// Config is how to reach Consul.
type Config struct {
	// Address is host:port, or http://host:port or https://host:port.
	// Default 127.0.0.1:8500.
	Address string
	// Scheme is http or https. Default http, or https when Address says
	// so or TLS is set.
	Scheme string
	// Token is the ACL token sent with every request. When empty, the
	// Consul client's environment applies (CONSUL_HTTP_TOKEN,
	// CONSUL_HTTP_TOKEN_FILE).
	Token string
	// TLS configures a TLS connection; nil means the system roots, no
	// client certificate.
	TLS *TLS
	// Datacenter is the datacenter to query. Default: the agent's.
	Datacenter string
	// WaitTime is how long one blocking query waits for a change (Consul
	// adds up to WaitTime/16 of jitter). Default 5m, at most 10m.
	WaitTime time.Duration
	// RequestTimeout bounds every request that does not block (register,
	// deregister, heartbeat, a plain list); a blocking query gets WaitTime
	// + WaitTime/16 + RequestTimeout. Default 10s.
	RequestTimeout time.Duration
	// MaxResponseBytes caps a response body. Default 64 MiB.
	MaxResponseBytes int64
	// ChurnInterval paces a watch whose blocking queries keep returning
	// without a change to its instances: after a burst of 2 such returns,
	// the next query waits so that they come at most once per
	// ChurnInterval. Default 15s (the rate Consul's docs suggest).
	// Returns that bring a change are never delayed.
	ChurnInterval time.Duration
	// Logger receives index resets and dropped instances. Default
	// slog.Default().
	Logger *slog.Logger
}

// TLS configures the connection to Consul.
type TLS struct {
	// CAFile verifies the server; default: the system roots.
	CAFile string
	// CertFile and KeyFile present a client certificate.
	CertFile string
	KeyFile  string
	// ServerName is the name verified in the server's certificate;
	// default: the host of Address.
	ServerName string
	// InsecureSkipVerify turns verification off (tests only).
	InsecureSkipVerify bool
}

// Registry talks to one Consul agent (or the embedded registry).
type Registry struct {
	client    *api.Client
	transport *http.Transport
	cfg       Config
	log       *slog.Logger
}

var (
	_ registry.Registrar   = (*Registry)(nil)
	_ registry.Heartbeater = (*Registry)(nil)
	_ registry.Discoverer  = (*Registry)(nil)
)

// New checks cfg and returns a Registry. It does not contact Consul.
func New(cfg Config) (*Registry, error) {
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("consul: %w", err)
	}
	transport, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("consul: http.DefaultTransport is not an *http.Transport")
	}
	tr := transport.Clone()
	// Every watch holds one connection for its blocking query; keep
	// enough idle ones per host that a reconnect storm is not needed.
	tr.MaxIdleConnsPerHost = 64
	if cfg.Scheme == "https" {
		var tc api.TLSConfig
		if t := cfg.TLS; t != nil {
			tc = api.TLSConfig{
				Address:            t.ServerName,
				CAFile:             t.CAFile,
				CertFile:           t.CertFile,
				KeyFile:            t.KeyFile,
				InsecureSkipVerify: t.InsecureSkipVerify,
			}
		}
		if tc.Address == "" {
			tc.Address = cfg.Address
		}
		tlsCfg, err := api.SetupTLSConfig(&tc)
		if err != nil {
			return nil, fmt.Errorf("consul: tls: %w", err)
		}
		tr.TLSClientConfig = tlsCfg
	}
	client, err := api.NewClient(&api.Config{
		Address:    cfg.Address,
		Scheme:     cfg.Scheme,
		Datacenter: cfg.Datacenter,
		Token:      cfg.Token,
		HttpClient: &http.Client{Transport: limitBodies{next: tr, max: cfg.MaxResponseBytes}},
	})
	if err != nil {
		return nil, fmt.Errorf("consul: %w", err)
	}
	return &Registry{client: client, transport: tr, cfg: cfg, log: cfg.Logger}, nil
}

// Close closes idle connections. Stop watches before closing; the
// Registry must not be used afterwards.
func (r *Registry) Close() error {
	r.transport.CloseIdleConnections()
	return nil
}

// fill validates cfg and applies the defaults. Address ends as host:port.
func (c *Config) fill() error {
	if c.Address == "" {
		c.Address = DefaultAddress
	}
	if scheme, rest, ok := strings.Cut(c.Address, "://"); ok {
		switch scheme {
		case "http", "https":
		default:
			return fmt.Errorf("address: %q: scheme %q is not http or https", c.Address, scheme)
		}
		if c.Scheme != "" && c.Scheme != scheme {
			return fmt.Errorf("scheme: %q contradicts address %q", c.Scheme, c.Address)
		}
		c.Scheme, c.Address = scheme, rest
	}
	if _, port, err := net.SplitHostPort(c.Address); err != nil || port == "" {
		return fmt.Errorf("address: %q is not host:port", c.Address)
	}
	switch c.Scheme {
	case "":
		c.Scheme = "http"
		if c.TLS != nil {
			c.Scheme = "https"
		}
	case "http", "https":
	default:
		return fmt.Errorf("scheme: %q is not http or https", c.Scheme)
	}
	if c.TLS != nil && c.Scheme == "http" {
		return errors.New("tls: set, but the scheme is http")
	}
	if t := c.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("tls: cert_file and key_file go together")
	}
	switch {
	case c.WaitTime < 0:
		return fmt.Errorf("wait_time: %v must not be negative", c.WaitTime)
	case c.WaitTime > MaxWaitTime:
		return fmt.Errorf("wait_time: %v is above Consul's limit of %v", c.WaitTime, MaxWaitTime)
	case c.WaitTime == 0:
		c.WaitTime = DefaultWaitTime
	}
	switch {
	case c.RequestTimeout < 0:
		return fmt.Errorf("request_timeout: %v must not be negative", c.RequestTimeout)
	case c.RequestTimeout == 0:
		c.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case c.MaxResponseBytes < 0:
		return fmt.Errorf("max_response_bytes: %d must not be negative", c.MaxResponseBytes)
	case c.MaxResponseBytes == 0:
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	switch {
	case c.ChurnInterval < 0:
		return fmt.Errorf("churn_interval: %v must not be negative", c.ChurnInterval)
	case c.ChurnInterval == 0:
		c.ChurnInterval = DefaultChurnInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Register stores r with the agent as a service with at most one check.
// Weight becomes Weights.Passing (Weights.Warning stays 1, Consul's
// default); Zone becomes Meta["zone"]. The check's ID is "service:<id>",
// which Heartbeat passes.
func (r *Registry) Register(ctx context.Context, reg registry.Registration) error {
	in := reg.Instance
	if err := in.Validate(); err != nil {
		return fmt.Errorf("consul: register %q: %w", in.ID, err)
	}
	if err := checkPathSegment("id", in.ID); err != nil {
		return fmt.Errorf("consul: register %q: %w", in.ID, err)
	}
	if err := checkPathSegment("service", in.Service); err != nil {
		return fmt.Errorf("consul: register %q: %w", in.ID, err)
	}
	check, err := agentCheck(in.ID, in.Service, reg.Check)
	if err != nil {
		return fmt.Errorf("consul: register %q: %w", in.ID, err)
	}
	var meta map[string]string
	if len(in.Meta) > 0 || in.Zone != "" {
		meta = maps.Clone(in.Meta)
		if meta == nil {
			meta = map[string]string{}
		}
		if in.Zone != "" {
			meta["zone"] = in.Zone
		}
	}
	svc := &api.AgentServiceRegistration{
		ID:      in.ID,
		Name:    in.Service,
		Tags:    in.Tags,
		Address: in.Address,
		Port:    in.Port,
		Meta:    meta,
		Weights: &api.AgentWeights{Passing: in.EffectiveWeight(), Warning: 1},
		Check:   check,
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	// replace-existing-checks: a registration replaces the old one whole,
	// checks included (Consul: PUT /v1/agent/service/register).
	opts := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)
	if err := r.client.Agent().ServiceRegisterOpts(svc, opts); err != nil {
		return fmt.Errorf("consul: register %q: %w", in.ID, err)
	}
	return nil
}

// agentCheck translates a registry.Check; the zero Check is no check.
func agentCheck(id, service string, c registry.Check) (*api.AgentServiceCheck, error) {
	kinds := 0
	for _, set := range []bool{c.TTL != 0, c.HTTP != "", c.TCP != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, errors.New("check: set exactly one of ttl, http and tcp")
	case c.TTL < 0:
		return nil, fmt.Errorf("check.ttl: %v must not be negative", c.TTL)
	case c.Interval < 0:
		return nil, fmt.Errorf("check.interval: %v must not be negative", c.Interval)
	case c.Timeout < 0:
		return nil, fmt.Errorf("check.timeout: %v must not be negative", c.Timeout)
	case c.DeregisterCriticalAfter < 0:
		return nil, fmt.Errorf("check.deregister_critical_after: %v must not be negative", c.DeregisterCriticalAfter)
	case kinds == 0 && c.DeregisterCriticalAfter > 0:
		return nil, errors.New("check.deregister_critical_after: needs a ttl, http or tcp check")
	case kinds == 0:
		return nil, nil
	}
	ac := &api.AgentServiceCheck{
		CheckID: "service:" + id,
		Name:    fmt.Sprintf("Service '%s' check", service),
	}
	if c.DeregisterCriticalAfter > 0 {
		ac.DeregisterCriticalServiceAfter = c.DeregisterCriticalAfter.String()
	}
	if c.TTL > 0 {
		ac.TTL = c.TTL.String()
		return ac, nil
	}
	if c.HTTP != "" {
		u, err := url.Parse(c.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("check.http: %q is not an http(s) URL", c.HTTP)
		}
		ac.HTTP = c.HTTP
	} else {
		if _, port, err := net.SplitHostPort(c.TCP); err != nil || port == "" {
			return nil, fmt.Errorf("check.tcp: %q is not host:port", c.TCP)
		}
		ac.TCP = c.TCP
	}
	// Consul requires an interval for HTTP and TCP checks.
	interval := c.Interval
	if interval == 0 {
		interval = DefaultCheckInterval
	}
	ac.Interval = interval.String()
	if c.Timeout > 0 {
		ac.Timeout = c.Timeout.String()
	}
	return ac, nil
}

// Deregister removes the service from the agent. An unknown ID is not an
// error.
func (r *Registry) Deregister(ctx context.Context, id string) error {
	if err := checkPathSegment("id", id); err != nil {
		return fmt.Errorf("consul: deregister %q: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	err := r.client.Agent().ServiceDeregisterOpts(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return fmt.Errorf("consul: deregister %q: %w", id, err)
	}
	return nil
}

// Heartbeat passes the TTL check "service:<id>". When the agent does not
// know the check (the service was deregistered, its critical TTL removed it,
// or the agent restarted) the error wraps registry.ErrNotRegistered.
func (r *Registry) Heartbeat(ctx context.Context, id string) error {
	if err := checkPathSegment("id", id); err != nil {
		return fmt.Errorf("consul: heartbeat %q: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	err := r.client.Agent().UpdateTTLOpts("service:"+id, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx))
	switch {
	case err == nil:
		return nil
	case unknownCheck(err):
		return fmt.Errorf("consul: heartbeat %q: %w: %w", id, registry.ErrNotRegistered, err)
	default:
		return fmt.Errorf("consul: heartbeat %q: %w", id, err)
	}
}

// unknownCheck recognises the agent's answers for a check it does not
// have: 404 from newer agents, 500 `CheckID "service:x" does not have
// associated TTL` from the ones that have said so since 0.x, and
// "Unknown check ID".
func unknownCheck(err error) bool {
	var se api.StatusError
	if !errors.As(err, &se) {
		return false
	}
	if se.Code == http.StatusNotFound {
		return true
	}
	body := strings.ToLower(se.Body)
	return se.Code == http.StatusInternalServerError &&
		(strings.Contains(body, "does not have associated ttl") || strings.Contains(body, "unknown check"))
}

func isStatus(err error, code int) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.Code == code
}

// checkPathSegment rejects names that would not stay one segment of the
// URL path Consul's client puts them in.
func checkPathSegment(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: must not be empty", field)
	}
	if s == "." || s == ".." || strings.ContainsAny(s, "/?#%\\") {
		return fmt.Errorf(`%s: %q must not be "." or ".." or contain any of / ? # %% \`, field, s)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%s: %q contains a control character", field, s)
		}
	}
	return nil
}

// limitBodies caps every response body at max bytes: a misbehaving or
// hostile server cannot make a watch buffer without bound (the Consul
// client decodes bodies whole).
type limitBodies struct {
	next http.RoundTripper
	max  int64
}

func (l limitBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > l.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: response of %d bytes is over the %d-byte limit", req.Method, req.URL.Path, resp.ContentLength, l.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: l.max, path: req.URL.Path, max: l.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
	path string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly max bytes from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%s: response is over the %d-byte limit", b.path, b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
