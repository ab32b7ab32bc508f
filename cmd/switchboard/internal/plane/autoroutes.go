package plane

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/upstream"
)

// RouteSource lists the embedded registry's services with the tags of
// their passing instances, blocking until the index moves past index (as
// a Consul blocking query does).
type RouteSource interface {
	WatchServices(ctx context.Context, index uint64) (services map[string][]string, newIndex uint64, err error)
}

// AutoRoutePrefix starts the tags that ask for a route, as in fabio:
// urlprefix-/orders or urlprefix-api.example.com/orders.
const AutoRoutePrefix = "urlprefix-"

// autoRoutes is the state of auto routes: the source, the services last
// read from it, the configuration without them, and the watch.
type autoRoutes struct {
	src      RouteSource
	services map[string][]string
	base     *config.Config
	watch    *loop
}

// SetRouteSource gives listeners with auto_routes their registry. Call it
// before the first Apply; the plane watches the source while it runs.
func (p *Plane) SetRouteSource(src RouteSource) {
	p.mu.Lock()
	p.auto.src = src
	p.mu.Unlock()
}

// followAutoRoutes starts or stops the watch of the route source as the
// configuration now asks; p.mu is held.
func (p *Plane) followAutoRoutes(want bool) {
	switch {
	case want && p.auto.watch == nil:
		src := p.auto.src
		p.auto.watch = startLoop(func(ctx context.Context) { p.watchRoutes(ctx, src) })
	case !want && p.auto.watch != nil:
		// The watch ends by itself: it checks its context under p.mu
		// before applying anything.
		p.auto.watch.cancel()
		p.auto.watch, p.auto.services = nil, nil
	}
}

// autoRoute is one route asked for by a registration's tag.
type autoRoute struct {
	service string
	host    string // "" for any
	prefix  string
	strip   string // fabio's strip= option: removed from the path before forwarding
}

// parseAutoRoute reads a urlprefix- tag: urlprefix-[host]/path, then
// options after spaces, of which this version knows fabio's strip=/path.
// ok is false for other tags and for tags with an option it does not
// understand (the route would not do what the tag asks).
func parseAutoRoute(service, tag string) (autoRoute, bool) {
	rest, ok := strings.CutPrefix(tag, AutoRoutePrefix)
	if !ok || rest == "" || rest[0] == ' ' || rest[0] == '\t' {
		return autoRoute{}, false
	}
	fields := strings.Fields(rest)
	rest = fields[0]
	var strip string
	for _, opt := range fields[1:] {
		v, ok := strings.CutPrefix(opt, "strip=")
		if !ok || strip != "" || config.CheckStripPrefix(v) != nil {
			return autoRoute{}, false
		}
		strip = v
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return autoRoute{}, false
	}
	host := strings.ToLower(rest[:i])
	if host != "" && (strings.Contains(host, ":") || strings.Contains(strings.TrimPrefix(host, "*."), "*")) {
		return autoRoute{}, false
	}
	return autoRoute{service: service, host: host, prefix: rest[i:], strip: strip}, true
}

// routesOf turns the registry's services into routes: host-specific
// before any-host, longer prefixes first, then by service name.
func routesOf(services map[string][]string) []autoRoute {
	var out []autoRoute
	seen := map[[2]string]bool{}
	for _, svc := range slices.Sorted(maps.Keys(services)) {
		for _, tag := range services[svc] {
			r, ok := parseAutoRoute(svc, tag)
			if !ok || seen[[2]string{r.host, r.prefix}] {
				continue // the first service (by name) to ask for a route keeps it
			}
			seen[[2]string{r.host, r.prefix}] = true
			out = append(out, r)
		}
	}
	// Exact hosts, then wildcard hosts, then any host; longer prefixes
	// first within each.
	rank := func(r autoRoute) int {
		switch {
		case r.host == "":
			return 2
		case strings.HasPrefix(r.host, "*."):
			return 1
		}
		return 0
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		if len(a.prefix) != len(b.prefix) {
			return len(a.prefix) > len(b.prefix)
		}
		return a.service < b.service
	})
	return out
}

// AutoUpstreamName is the upstream that serves a service's auto routes.
func AutoUpstreamName(service string) string { return "auto:" + service }

// withAutoRoutes returns cfg with the auto routes appended to the routes of
// every listener that asks for them, and their upstreams added. cfg itself
// is not changed.
func withAutoRoutes(cfg *config.Config, services map[string][]string) *config.Config {
	routes := routesOf(services)
	if len(routes) == 0 {
		return cfg
	}
	out := *cfg
	out.Listeners = slices.Clone(cfg.Listeners)
	out.Upstreams = maps.Clone(cfg.Upstreams)
	if out.Upstreams == nil {
		out.Upstreams = map[string]*config.Upstream{}
	}
	used := map[string]bool{}
	for i := range out.Listeners {
		l := &out.Listeners[i]
		if !l.AutoRoutes {
			continue
		}
		l.Routes = slices.Clip(l.Routes)
		for _, r := range routes {
			timeout := config.DefaultRouteTimeout
			rc := config.Route{
				Name:     l.Name + "/auto/" + r.host + r.prefix,
				Match:    config.Match{Host: r.host, PathPrefix: r.prefix},
				Upstream: AutoUpstreamName(r.service),
				Timeout:  &timeout,
			}
			if r.strip != "" {
				rc.Rewrite = &config.Rewrite{StripPrefix: r.strip}
			}
			l.Routes = append(l.Routes, rc)
			used[r.service] = true
		}
	}
	for svc := range used {
		maxIdle := config.DefaultMaxIdlePerEndpoint
		passing := true
		out.Upstreams[AutoUpstreamName(svc)] = &config.Upstream{
			Config: upstream.Config{
				Balance: balance.Config{Policy: config.DefaultBalancePolicy},
				Health:  upstream.Health{Passive: config.DefaultPassive()},
			},
			Protocol:               config.DefaultUpstreamProtocol,
			Discovery:              &config.UpstreamDiscovery{Registry: config.EmbeddedRegistry, Service: svc, PassingOnly: &passing},
			Timeouts:               config.UpstreamTimeouts{Connect: config.DefaultConnectTimeout, ResponseHeader: config.DefaultResponseHeaderTimeout},
			MaxIdlePerEndpoint:     &maxIdle,
			IdleTimeout:            config.DefaultUpstreamIdleTimeout,
			MaxResponseHeaderBytes: config.DefaultMaxResponseHeaderBytes,
		}
	}
	return &out
}

func wantsAutoRoutes(cfg *config.Config) bool {
	for _, l := range cfg.Listeners {
		if l.AutoRoutes {
			return true
		}
	}
	return false
}

// watchRoutes follows the route source and re-applies the configuration
// with the new auto routes whenever the registry's services change. It
// runs until ctx ends.
func (p *Plane) watchRoutes(ctx context.Context, src RouteSource) {
	var index uint64
	backoff := 100 * time.Millisecond
	for {
		services, next, err := src.WatchServices(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.log.Warn("auto routes: reading the registry failed; keeping the current routes", "err", err)
			if clock.Sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		if next < index {
			next = 0 // the index went backwards: start over, as Consul's clients do
		}
		index = next
		p.mu.Lock()
		if p.closed || p.auto.base == nil || ctx.Err() != nil {
			p.mu.Unlock()
			return
		}
		err = nil
		if !maps.EqualFunc(services, p.auto.services, slices.Equal) {
			if err = p.applyLocked(withAutoRoutes(p.auto.base, services)); err == nil {
				p.auto.services = services
				p.logAutoRoutes(services)
			}
		}
		p.mu.Unlock()
		if err == nil {
			backoff = 100 * time.Millisecond
		} else {
			// Not applied: try the same services again after a backoff
			// (a certificate mid-rotation, a registry feed that failed).
			p.log.Error("auto routes: applying the registry's routes failed; keeping the current routes and retrying", "err", err, "retry_in", backoff)
			if clock.Sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			index = 0
		}
	}
}

// logAutoRoutes logs, once per change, the urlprefix- tags it cannot use
// and the routes another service already claimed.
func (p *Plane) logAutoRoutes(services map[string][]string) {
	claimed := map[[2]string]string{}
	for _, svc := range slices.Sorted(maps.Keys(services)) {
		for _, tag := range services[svc] {
			if !strings.HasPrefix(tag, AutoRoutePrefix) {
				continue
			}
			r, ok := parseAutoRoute(svc, tag)
			if !ok {
				p.log.Warn("auto routes: ignoring a urlprefix- tag this version does not understand (want urlprefix-[host]/path, with no option but strip=/path)", "service", svc, "tag", tag)
				continue
			}
			k := [2]string{r.host, r.prefix}
			if first, dup := claimed[k]; dup {
				p.log.Warn("auto routes: two services ask for one route; the first by name keeps it", "route", r.host+r.prefix, "kept", first, "ignored", svc)
				continue
			}
			claimed[k] = svc
		}
	}
	p.log.Info("auto routes applied", "routes", len(claimed), "services", len(services))
}
