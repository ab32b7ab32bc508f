package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/config/registryopen"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Service is one destination of the client, called as http://NAME/...:
// how its endpoints are found and judged (Upstream), and how calls to it
// are protected and retried (Pipeline, and Routes for the calls that match
// one of them).
type Service struct {
	// Upstream is the service's balancing policy, static Targets or View,
	// health (active checks, passive ejection, panic threshold), endpoint
	// breakers and concurrency limit. With neither Targets nor View the
	// endpoints are discovered in a registry given with WithRegistry (see
	// Registry and Query).
	Upstream upstream.Config
	// Pipeline protects the calls that match none of Routes: rate limits,
	// concurrency, breaker, retries (budget, idempotency, hedging),
	// fallback chain and the whole-call Timeout. The zero value sends each
	// call once, retrying only what is always safe (see package pipeline).
	Pipeline pipeline.Config
	// Routes are tried in order before Pipeline; the first whose Match
	// matches a call protects it with its own pipeline, over the same
	// upstream.
	Routes []Route
	// Registry names the registry (WithRegistry) the endpoints are
	// discovered in when Upstream has neither Targets nor View. Default:
	// the only registry given.
	Registry string
	// Query is what is discovered. Default: the service's name as
	// declared (its case kept), passing instances only.
	Query *registry.Query
	// Transport sends the requests to the endpoints; nil means the
	// client's (WithTransport).
	Transport http.RoundTripper

	declared string // the name as given to WithService
	fromYAML bool   // Transport was shaped by WithConfig from connection keys
	tls      bool   // the endpoints speak TLS (an upstream with protocol https or tls)
}

// Route protects the calls to a service that match it with a pipeline of
// its own: for example retries for GETs under /api, or a tighter rate
// limit on POSTs.
type Route struct {
	// Name names the route in metrics and logs. Default "SERVICE/INDEX".
	Name string
	// Match selects the calls; every field set must match.
	Match Match
	// Pipeline is the route's protection.
	Pipeline pipeline.Config
}

// Match selects calls within a service, as a proxy route's match does
// (the service itself is the request's host).
type Match struct {
	// PathPrefix matches paths that start with it. Default: any path.
	PathPrefix string
	// Methods matches any of the listed methods. Default: any.
	Methods []string
	// Headers matches calls carrying each header with exactly the value.
	Headers map[string]string
}

// matches reports whether r is selected by m.
func (m *Match) matches(r *http.Request) bool {
	if m.PathPrefix != "" && !strings.HasPrefix(r.URL.Path, m.PathPrefix) {
		return false
	}
	if len(m.Methods) > 0 && !slices.Contains(m.Methods, r.Method) {
		return false
	}
	for k, v := range m.Headers {
		if r.Header.Get(k) != v {
			return false
		}
	}
	return true
}

// Option configures New.
type Option func(*options) error

type options struct {
	services   map[string]Service
	order      []string
	registries map[string]registry.Discoverer
	views      map[string]*discovery.Discovery // given ready-made
	discOpts   discovery.Options
	base       http.RoundTripper
	transport  http.RoundTripper
	metrics    *Metrics
	log        *slog.Logger
	owned      []*http.Transport // made by WithConfig, closed by Close
	// yamlDisc is the discovery block of WithConfig: it fills what
	// WithDiscoveryOptions leaves unset, whatever the options' order.
	yamlDisc *config.Discovery
	// backends are the registries of a YAML configuration's registries
	// block, opened by New unless the program gives one of the same name.
	backends map[string]*config.RegistryBackend
}

// WithService declares the service name (the host of the URLs that call
// it, as in http://orders/list) with its configuration. Names are matched
// without regard to case and without the port.
func WithService(name string, s Service) Option {
	return func(o *options) error {
		key := strings.ToLower(name)
		if key == "" || strings.ContainsAny(key, ":/ ") {
			return fmt.Errorf("client: service name %q is not a host name", name)
		}
		if _, dup := o.services[key]; dup {
			return fmt.Errorf("client: service %q is declared twice", name)
		}
		s.declared = name
		o.services[key] = s
		o.order = append(o.order, key)
		return nil
	}
}

// WithRegistry makes d, any registry backend (registry/consul against
// Consul or the embedded registry, registry/etcd, registry/dns,
// registry/static, or a *registryd.Server's Discoverer), available under
// name to the services that discover their endpoints. The client watches
// it through a discovery cache: changes arrive as the backend delivers
// them (blocking queries, watches), and while the registry is down the
// last known instances keep serving.
func WithRegistry(name string, d registry.Discoverer) Option {
	return func(o *options) error {
		if d == nil {
			return fmt.Errorf("client: registry %q is nil", name)
		}
		o.registries[name] = d
		return nil
	}
}

// WithDiscovery is WithRegistry for a discovery cache the caller already
// runs (and closes): the client's views share its watches.
func WithDiscovery(name string, d *discovery.Discovery) Option {
	return func(o *options) error {
		if d == nil {
			return fmt.Errorf("client: discovery %q is nil", name)
		}
		o.views[name] = d
		return nil
	}
}

// WithDiscoveryOptions tunes the discovery caches the client makes for
// WithRegistry: the disk cache, the empty-answer grace and the backoff
// after registry errors. The client sets Registry, Logger and Metrics.
// A YAML configuration's discovery block (WithConfig) fills the fields
// left zero here, in whichever order the options come.
func WithDiscoveryOptions(opts discovery.Options) Option {
	return func(o *options) error {
		o.discOpts = opts
		return nil
	}
}

// WithBase passes the requests to hosts that are not a declared service
// to rt (http.DefaultTransport, say). Without it such a request fails
// with an *UnknownServiceError.
func WithBase(rt http.RoundTripper) Option {
	return func(o *options) error {
		o.base = rt
		return nil
	}
}

// WithTransport sets the RoundTripper that sends requests to endpoints
// (http://ENDPOINT-ADDRESS/...). Default: a transport of the client's own,
// that keeps up to 64 idle connections per endpoint and uses no proxy.
// It is used for the services of a YAML configuration (WithConfig) too,
// in place of the transports their connection keys would shape; a
// Service's own Transport wins over it.
func WithTransport(rt http.RoundTripper) Option {
	return func(o *options) error {
		o.transport = rt
		return nil
	}
}

// Metrics are the client's Prometheus metrics. They are the proxy's, with
// the same names and labels: the upstreams' (switchboard_endpoint_*), the
// pipelines' (retries, errors, rate limits, breakers, fallbacks), the
// discovery caches' and the HTTP request metrics, whose listener label is
// "client". Create them once per registerer with NewMetrics and hand them
// to every Client that should count there (WithMetrics): a registerer
// takes each metric name once, so a second NewMetrics on the same one
// panics, as prometheus.MustRegister does.
type Metrics struct {
	up   *upstream.Metrics
	pipe *pipeline.Metrics
	disc *discovery.Metrics
	http *httpmetrics.Metrics
}

// NewMetrics creates the client's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		up:   upstream.NewMetrics(reg),
		pipe: pipeline.NewMetrics(reg),
		disc: discovery.NewMetrics(reg),
		http: httpmetrics.New(reg),
	}
}

// WithMetrics makes the client count in m (see NewMetrics); several
// clients may share one. Default: no metrics.
func WithMetrics(m *Metrics) Option {
	return func(o *options) error {
		o.metrics = m
		return nil
	}
}

// WithLogger sets the logger for endpoint state changes, breaker
// transitions and registry trouble. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.log = l
		return nil
	}
}

// Client is an http.RoundTripper that sends each request for a declared
// service through that service's upstream and pipeline. It is safe for
// concurrent use. Close it when done.
type Client struct {
	services  map[string]*service
	base      http.RoundTripper
	transport http.RoundTripper
	owned     []*http.Transport // transports of the client's own, closed by Close
	closers   []func() error    // registry clients New opened, closed by Close
	closeOnce sync.Once
	discs     []*discovery.Discovery
	metrics   *httpmetrics.Metrics
	log       *slog.Logger
}

// service is a declared service as it runs.
type service struct {
	name   string
	up     *upstream.Upstream
	routes []*route // the Routes, then the default route last
	// view is the registry view the service follows until it has
	// answered once (calls wait for that), nil for none or after.
	view  readier
	ready atomic.Bool
}

// readier is a view that can say when it has its first answer (a
// *discovery.View).
type readier interface {
	Ready(ctx context.Context) error
}

// await waits, within ctx, for the service's registry view to answer for
// the first time.
func (s *service) await(ctx context.Context) error {
	if s.view == nil || s.ready.Load() {
		return nil
	}
	if err := s.view.Ready(ctx); err != nil {
		return &pipeline.Error{Status: http.StatusServiceUnavailable, Code: pipeline.CodeNoEndpoint, Err: err,
			Msg: "service " + s.name + ": its registry has not answered yet"}
	}
	s.ready.Store(true)
	return nil
}

// route is a running route with its matcher.
type route struct {
	match Match
	p     *pipeline.Route
	m     *httpmetrics.Route
	all   bool // the service's default route: matches everything
}

// pick returns the route for r.
func (s *service) pick(r *http.Request) *route {
	for _, rt := range s.routes {
		if rt.all || rt.match.matches(r) {
			return rt
		}
	}
	return s.routes[len(s.routes)-1]
}

// New builds a Client from opts and starts its upstreams (and the
// registry watches of those that discover their endpoints). It does not
// wait for the first answers of the registries: a call to a service whose
// registry has not answered yet waits for it, within the call's context.
func New(opts ...Option) (*Client, error) {
	o := &options{services: map[string]Service{}, registries: map[string]registry.Discoverer{}, views: map[string]*discovery.Discovery{}}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	c := &Client{services: map[string]*service{}, base: o.base, transport: o.transport, log: o.log, owned: o.owned}
	if c.transport == nil {
		t := defaultTransport(defaultMaxIdlePerEndpoint)
		c.owned = append(c.owned, t)
		c.transport = t
	}
	var (
		upm   *upstream.Metrics
		pipem *pipeline.Metrics
		discm *discovery.Metrics
	)
	if m := o.metrics; m != nil {
		upm, pipem, discm = m.up, m.pipe, m.disc
		c.metrics = m.http
	}
	fail := func(err error) (*Client, error) {
		c.Close()
		return nil, err
	}
	for _, name := range sortedNames(o.backends) {
		if o.registries[name] != nil || o.views[name] != nil {
			continue // the program's own wins
		}
		d, closer, err := registryopen.Open(o.backends[name], o.log.With("registry", name))
		if err != nil {
			return fail(fmt.Errorf("client: registry %q: %w", name, err))
		}
		if closer != nil {
			c.closers = append(c.closers, closer)
		}
		o.registries[name] = d
	}
	discs := map[string]*discovery.Discovery{}
	for name, d := range o.views {
		discs[name] = d
	}
	if y := o.yamlDisc; y != nil {
		if o.discOpts.CacheDir == "" {
			o.discOpts.CacheDir = y.CacheDir
		}
		if o.discOpts.EmptyGrace == 0 {
			o.discOpts.EmptyGrace = y.EmptyGrace.Std()
		}
	}
	for _, name := range sortedNames(o.registries) {
		dopts := o.discOpts
		dopts.Registry, dopts.Logger, dopts.Metrics = name, o.log.With("registry", name), discm
		d, err := discovery.New(o.registries[name], dopts)
		if err != nil {
			return fail(fmt.Errorf("client: registry %q: %w", name, err))
		}
		c.discs = append(c.discs, d)
		discs[name] = d
	}
	// Upstreams first, so that a backup fallback step can name any service.
	transports := map[string]pipeline.Transport{}
	for _, name := range o.order {
		s := o.services[name]
		ucfg := s.Upstream
		if ucfg.View == nil && len(ucfg.Targets) == 0 {
			v, err := watch(name, s, discs)
			if err != nil {
				return fail(err)
			}
			ucfg.View = v
		}
		up, err := upstream.New(name, ucfg, upstream.WithLogger(o.log), upstream.WithMetrics(upm))
		if err != nil {
			if ucfg.View != nil && s.Upstream.View == nil {
				ucfg.View.Close()
			}
			return fail(fmt.Errorf("client: service %q: %w", name, err))
		}
		svc := &service{name: name, up: up}
		if r, ok := ucfg.View.(readier); ok {
			svc.view = r
		}
		c.services[name] = svc
		rt := s.Transport
		if rt == nil || (s.fromYAML && o.transport != nil) {
			rt = c.transport // WithTransport wins over the YAML's connection keys
		}
		transports[name] = &transport{rt: rt, tls: s.tls}
	}
	backups := func(name string) (*upstream.Upstream, pipeline.Transport, bool) {
		s := c.services[strings.ToLower(name)]
		if s == nil {
			return nil, nil, false
		}
		return s.up, transports[s.name], true
	}
	for _, name := range o.order {
		s, svc := o.services[name], c.services[name]
		popts := []pipeline.Option{pipeline.WithMetrics(pipem), pipeline.WithLogger(o.log), pipeline.WithBackups(backups)}
		for i, r := range s.Routes {
			rname := r.Name
			if rname == "" {
				rname = fmt.Sprintf("%s/%d", name, i)
			}
			p, err := pipeline.New(rname, r.Pipeline, svc.up, transports[name], popts...)
			if err != nil {
				return fail(fmt.Errorf("client: service %q: route %q: %w", name, rname, err))
			}
			m := r.Match
			m.Methods = upperAll(m.Methods)
			m.Headers = canonical(m.Headers)
			svc.routes = append(svc.routes, &route{match: m, p: p, m: c.metrics.Route(listener, rname, name)})
		}
		p, err := pipeline.New(name, s.Pipeline, svc.up, transports[name], popts...)
		if err != nil {
			return fail(fmt.Errorf("client: service %q: %w", name, err))
		}
		svc.routes = append(svc.routes, &route{p: p, all: true, m: c.metrics.Route(listener, name, name)})
	}
	return c, nil
}

// watch opens the view a discovered service follows.
func watch(name string, s Service, discs map[string]*discovery.Discovery) (upstream.View, error) {
	reg := s.Registry
	if reg == "" {
		if len(discs) != 1 {
			return nil, fmt.Errorf("client: service %q has no targets and names no registry (registries given: %s)", name, strings.Join(sortedNames(discs), ", "))
		}
		for n := range discs {
			reg = n
		}
	}
	d := discs[reg]
	if d == nil {
		return nil, fmt.Errorf("client: service %q: registry %q is not given (WithRegistry; given: %s)", name, reg, strings.Join(sortedNames(discs), ", "))
	}
	q := registry.Query{Service: s.declared, PassingOnly: true}
	if s.Query != nil {
		q = *s.Query
	}
	return d.Watch(q), nil
}

// Close stops the client: its upstreams' health checks and registry
// watches, and the idle connections of its own transport. Calls in
// progress may finish; later calls to a service fail or are answered on
// the endpoints last known.
func (c *Client) Close() {
	c.closeOnce.Do(c.close)
}

func (c *Client) close() {
	for _, s := range c.services {
		for _, r := range s.routes {
			r.p.Close()
		}
		s.up.Close()
	}
	for _, d := range c.discs {
		d.Close()
	}
	for _, t := range c.owned {
		t.CloseIdleConnections()
	}
	for _, closeRegistry := range c.closers {
		if err := closeRegistry(); err != nil {
			c.log.Warn("closing a registry client failed", "error", err)
		}
	}
}

// HTTPClient returns an *http.Client that sends its requests through c.
// Its Timeout is zero: bound calls with their contexts, or the routes'
// timeouts.
func (c *Client) HTTPClient() *http.Client { return &http.Client{Transport: c} }

// Services lists the declared services, sorted.
func (c *Client) Services() []string { return sortedNames(c.services) }

// Upstream returns the running upstream of a service, for a look at its
// endpoints and their states (Pool), or nil when there is no such service.
func (c *Client) Upstream(service string) *upstream.Upstream {
	if s := c.services[strings.ToLower(service)]; s != nil {
		return s.up
	}
	return nil
}

// UnknownServiceError is the error of a request whose host is not a
// declared service, when the client has no base RoundTripper (WithBase).
type UnknownServiceError struct {
	// Host is the request's host, as in its URL.
	Host string
	// Known lists the declared services.
	Known []string
}

func (e *UnknownServiceError) Error() string {
	known := "no services are declared"
	if len(e.Known) > 0 {
		known = "declared: " + strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("switchboard client: %q is not a declared service (%s)", e.Host, known)
}

// ErrScheme is the error of a request to a declared service whose URL
// scheme is not http: a service is named by http://NAME, and its
// configuration says whether its endpoints speak TLS.
var ErrScheme = errors.New("switchboard client: a service is called with http:// (its configuration says whether its endpoints speak TLS)")

const (
	defaultMaxIdlePerEndpoint = 64
	defaultKeepAlive          = 30 * time.Second
)

// defaultTransport is the client's transport to endpoints: keep-alive
// connections, no proxy from the environment (endpoints are dialled
// directly), and a pool per endpoint as large as the proxy's.
func defaultTransport(maxIdle int) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: defaultKeepAlive}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   maxIdle,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

func upperAll(ms []string) []string {
	if len(ms) == 0 {
		return nil
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = strings.ToUpper(m)
	}
	return out
}

func canonical(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[http.CanonicalHeaderKey(k)] = v
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
