package plane

import (
	"crypto/tls"
	"fmt"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
	"github.com/switchboard-dev/switchboard/proxy/tcpproxy"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Upstream is one running upstream with the transport the HTTP proxy
// talks to its endpoints over. It is what the admin API shows.
type Upstream struct {
	name     string
	up       *upstream.Upstream
	t        *httpproxy.Transport
	protocol string
	viewKey  string      // the discovery settings its view follows; "" for targets
	tls      *tls.Config // nil: cleartext
	tlsSum   config.TLSSum
}

// Name is the upstream's configured name.
func (u *Upstream) Name() string { return u.name }

// Pool is the upstream's endpoint pool.
func (u *Upstream) Pool() *endpoint.Pool { return u.up.Pool() }

// Policy is the balancing policy's name.
func (u *Upstream) Policy() string { return u.up.Policy() }

// Protocol is the protocol spoken to the endpoints.
func (u *Upstream) Protocol() string { return u.protocol }

// ConnStats returns the open and idle connections per endpoint address
// (HTTP/1.1 upstreams only).
func (u *Upstream) ConnStats() map[string][2]int64 { return u.t.ConnStats() }

func (u *Upstream) close() {
	u.up.Close()
	u.t.Close()
}

// upstreamChanges are the upstreams of a configuration being applied.
type upstreamChanges struct {
	next    map[string]*Upstream
	changes []*upstream.Change
	newT    []*httpproxy.Transport // transports built for it
	oldT    []*httpproxy.Transport // transports it replaces
}

// discard drops what prepareUpstreams built.
func (c *upstreamChanges) discard() {
	for _, ch := range c.changes {
		ch.Discard()
	}
	for _, t := range c.newT {
		t.Close()
	}
}

// prepareUpstreams builds every upstream of cfg: a running upstream of the
// same name is prepared for its new settings (keeping its pool, and every
// part whose settings are unchanged); a new one is built, not started.
func (p *Plane) prepareUpstreams(cfg *config.Config) (*upstreamChanges, error) {
	c := &upstreamChanges{next: make(map[string]*Upstream, len(cfg.Upstreams))}
	for name, uc := range cfg.Upstreams {
		u, err := p.prepareUpstream(c, name, uc)
		if err != nil {
			c.discard()
			return nil, fmt.Errorf("upstream %q: %w", name, err)
		}
		c.next[name] = u
	}
	return c, nil
}

func (p *Plane) prepareUpstream(c *upstreamChanges, name string, uc *config.Upstream) (*Upstream, error) {
	prev := p.ups[name]
	next := &Upstream{name: name, protocol: uc.Protocol, viewKey: viewKey(uc.Discovery)}
	if err := p.loadUpstreamTLS(name, uc, prev, next); err != nil {
		return nil, err
	}
	lc, err := p.upstreamConfig(uc, prev, next.viewKey)
	if err != nil {
		return nil, err
	}
	lc.Health = config.HealthOverTLS(lc.Health, next.tls)
	var ch *upstream.Change
	if prev != nil {
		ch, err = prev.up.Prepare(lc)
	} else {
		ch, err = upstream.Build(name, lc, upstream.WithLogger(p.log), upstream.WithMetrics(p.m.ups))
	}
	if err != nil {
		if lc.View != nil && (prev == nil || lc.View != prev.up.Config().View) {
			lc.View.Close()
		}
		return nil, err
	}
	c.changes = append(c.changes, ch)
	next.up = ch.Upstream()
	tc := transportConfig(uc)
	tc.TLS = next.tls
	if prev != nil && prev.t.Config() == tc {
		next.t = prev.t
	} else {
		next.t = httpproxy.NewTransport(tc, next.up.Pool())
		next.t.ObserveResponseHeader(p.m.http.ResponseHeader(name))
		c.newT = append(c.newT, next.t)
		if prev != nil {
			c.oldT = append(c.oldT, prev.t)
		}
	}
	return next, nil
}

// commitUpstreams starts the prepared upstreams and stops those cfg no
// longer has; p.mu is held.
func (p *Plane) commitUpstreams(c *upstreamChanges) {
	for _, ch := range c.changes {
		ch.Commit()
	}
	for _, t := range c.oldT {
		t.Close()
	}
	for name, u := range p.ups {
		if _, kept := c.next[name]; !kept {
			u.close()
		}
	}
	p.ups = c.next
	next := c.next
	p.byName.Store(&next)
	list := sortedUpstreams(next)
	p.list.Store(&list)
}

// upstreamConfig is uc's upstream.Config with the view to follow: an
// upstream with discovery keeps the view of prev while its discovery
// settings are unchanged, and otherwise gets a new one.
func (p *Plane) upstreamConfig(uc *config.Upstream, prev *Upstream, key string) (upstream.Config, error) {
	lc := uc.Config
	d := uc.Discovery
	if d == nil {
		return lc, nil
	}
	lc.RequirePassing = d.PassingOnly == nil || *d.PassingOnly
	if prev != nil && prev.viewKey == key {
		lc.View = prev.up.Config().View
		return lc, nil
	}
	if p.regs == nil {
		return lc, fmt.Errorf("discovery: no registries are running in this process")
	}
	v, err := p.regs.Watch(d.Registry, discoveryQuery(d))
	if err != nil {
		return lc, fmt.Errorf("discovery: %w", err)
	}
	lc.View = v
	return lc, nil
}

// viewKey identifies an upstream's discovery settings: a reload that keeps
// them keeps the view.
func viewKey(d *config.UpstreamDiscovery) string {
	if d == nil {
		return ""
	}
	return d.Registry + "|" + discoveryQuery(d).Key()
}

// discoveryQuery asks for every instance of d's service, whatever its
// health: passing_only is applied by the upstream (RequirePassing), so that
// an instance the registry fails stays visible as an unhealthy endpoint,
// with its reason and its counters, rather than vanish.
func discoveryQuery(d *config.UpstreamDiscovery) registry.Query {
	return registry.Query{Service: d.Service, Tags: d.Tags}
}

// transportConfig is how the proxy talks to uc's endpoints.
func transportConfig(uc *config.Upstream) httpproxy.TransportConfig {
	maxIdle := config.DefaultMaxIdlePerEndpoint
	if uc.MaxIdlePerEndpoint != nil {
		maxIdle = *uc.MaxIdlePerEndpoint
	}
	return httpproxy.TransportConfig{
		Protocol: uc.Protocol, ConnectTimeout: uc.Timeouts.Connect.Std(), ResponseHeaderTimeout: uc.Timeouts.ResponseHeader.Std(),
		IdleTimeout: uc.IdleTimeout.Std(), MaxIdlePerEndpoint: maxIdle,
		MaxResponseHeaderBytes: int64(uc.MaxResponseHeaderBytes),
	}
}

// pipelineConfig is rc's pipeline.Config with its timeout.
func pipelineConfig(rc *config.Route) pipeline.Config {
	pc := rc.Config
	if rc.Timeout != nil {
		pc.Timeout = rc.Timeout.Std()
	}
	return pc
}

// tcpSpecs are the tcp listeners of cfg in proxy/tcpproxy's form.
func tcpSpecs(cfg *config.Config) []tcpproxy.Spec {
	var out []tcpproxy.Spec
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		if lc.Protocol == "tcp" {
			out = append(out, tcpproxy.Spec{Listen: lc.Listen, Config: tcpConfig(lc, cfg.Upstreams)})
		}
	}
	return out
}

// tcpConfig is the proxy/tcpproxy form of a validated tcp listener.
func tcpConfig(lc *config.Listener, ups map[string]*config.Upstream) tcpproxy.Config {
	c := tcpproxy.Config{
		Name:                lc.Name,
		Upstream:            lc.Upstream,
		SNITimeout:          lc.Timeouts.ReadHeader.Std(),
		ConnectAttempts:     lc.ConnectAttempts,
		IdleTimeout:         lc.Timeouts.Idle.Std(),
		MaxConns:            lc.MaxConns,
		MaxConnsPerEndpoint: lc.MaxConnsPerEndpoint,
		Engine:              lc.Engine, // validated: auto resolves in tcpproxy as in config.Listener.EventLoop
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = tcpproxy.NoIdleTimeout
	}
	// A connect attempt is bounded by its upstream's timeouts.connect; with
	// SNI routes to several upstreams, by the longest of theirs.
	names := []string{lc.Upstream}
	for _, r := range lc.SNI {
		c.SNI = append(c.SNI, tcpproxy.SNIRoute{Names: r.Names, Upstream: r.Upstream})
		names = append(names, r.Upstream)
	}
	for _, n := range names {
		if u := ups[n]; u != nil {
			c.ConnectTimeout = max(c.ConnectTimeout, u.Timeouts.Connect.Std())
		}
	}
	if q := lc.Queue; q != nil {
		c.QueueSize, c.QueueTimeout = q.Size, q.Timeout.Std()
	}
	if pp := lc.ProxyProtocol; pp != nil {
		c.SendProxyProtocol = pp.Send
		c.AcceptProxyProtocol = pp.Accept
		c.TrustedProxies = config.ParsePrefixes(pp.TrustedProxies)
		c.ProxyProtocolTimeout = lc.Timeouts.ReadHeader.Std()
	}
	return c
}
