// Package plane assembles switchboard's data plane from a configuration:
// the upstreams (upstream), each route's pipeline (pipeline), the HTTP
// listeners (proxy/httpproxy) and the tcp listeners (proxy/tcpproxy), plus
// the routes the embedded registry asks for (auto routes) and the sweep of
// metric series whose owners are gone. Apply moves all of it to a new
// configuration, all or nothing.
package plane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/acme"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
	"github.com/switchboard-dev/switchboard/proxy/tcpproxy"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Registries give upstreams with discovery their registry's view of a
// service. cmd/switchboard/internal/registries implements it.
type Registries interface {
	// Watch starts (or shares) a view of the query's instances from the
	// named registry ("embedded" or an entry of registries).
	Watch(registryName string, q registry.Query) (upstream.View, error)
}

// Plane is the running data plane of one switchboard.
type Plane struct {
	log *slog.Logger
	m   metrics

	mu       sync.Mutex // serialises Apply, the auto-route watch, the sweep and Shutdown
	closed   bool
	regs     Registries
	ups      map[string]*Upstream
	byName   atomic.Pointer[map[string]*Upstream] // for tcp picks and backup steps, lock-free
	list     atomic.Pointer[[]*Upstream]          // sorted by name, for the admin API
	routes   map[string]*pipeline.Route
	http     *httpproxy.Server
	tcp      *tcpproxy.Server
	auto     autoRoutes
	sweeping sweeping
	tracing  tracingState
	// applied is the configuration running now (auto routes included)
	// and its route pipelines, for Listeners.
	applied atomic.Pointer[applied]
}

// applied is what Apply last committed.
type applied struct {
	cfg    *config.Config
	routes map[string]*pipeline.Route
}

// metrics are every part's metrics, registered once.
type metrics struct {
	http *httpproxy.Metrics
	traf *httpproxy.TrafficMetrics
	pipe *pipeline.Metrics
	ups  *upstream.Metrics
	tcp  *tcpproxy.Metrics
}

// New returns a plane with nothing running; its metrics go to reg.
func New(log *slog.Logger, reg prometheus.Registerer) *Plane {
	p := &Plane{log: log, ups: map[string]*Upstream{}, routes: map[string]*pipeline.Route{}}
	p.m = metrics{http: httpproxy.NewMetrics(reg), pipe: pipeline.NewMetrics(reg), ups: upstream.NewMetrics(reg), tcp: tcpproxy.NewMetrics(reg)}
	p.m.traf = httpproxy.NewTrafficMetrics(reg)
	p.http = httpproxy.NewServer(log, p.m.http)
	p.http.UseACMEMetrics(acme.NewMetrics(reg))
	p.http.SetTrafficMetrics(p.m.traf)
	p.tcp = tcpproxy.NewServer(p.tcpUpstream, p.m.tcp, log)
	p.byName.Store(&map[string]*Upstream{})
	p.list.Store(&[]*Upstream{})
	p.sweeping.vecs = append(append(append(p.m.http.Vecs(), p.m.pipe.Vecs()...), p.m.ups.Vecs()...), p.m.traf.Vecs()...)
	certs := httpproxy.NewCertMetrics(reg)
	p.http.SetCertMetrics(certs)
	p.sweeping.vecs = append(p.sweeping.vecs, certs.Vecs()...)
	return p
}

// SetAccessLog has the HTTP listeners write their access log lines with
// httpproxy's encoder to al.Writer, in the bytes of the process log's
// handler that al describes (httpproxy.Server.SetAccessLog). Call it
// before the first Apply; without it, lines go through the plane's logger.
func (p *Plane) SetAccessLog(al httpproxy.AccessLog) error {
	return p.http.SetAccessLog(al)
}

// SetRegistries gives upstreams with discovery their registries. Call it
// before the Apply that first needs it.
func (p *Plane) SetRegistries(r Registries) {
	p.mu.Lock()
	p.regs = r
	p.mu.Unlock()
}

// Upstreams returns the running upstreams, sorted by name.
func (p *Plane) Upstreams() []*Upstream { return *p.list.Load() }

// Addr returns the bound address of the named listener, http or tcp (""
// if none): tests learn the port of a listener on port 0.
func (p *Plane) Addr(name string) string {
	if a := p.http.Addr(name); a != "" {
		return a
	}
	return p.tcp.Addr(name)
}

// TCPStats returns the tcp listeners' statistics, for the admin API.
func (p *Plane) TCPStats() []tcpproxy.Stats { return p.tcp.Stats() }

// Apply moves the plane to cfg, which must have passed validation. Either
// all of cfg takes effect or, on error, none of it does: upstreams, route
// pipelines, certificates and new sockets are all prepared before anything
// running is touched.
func (p *Plane) Apply(cfg *config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("the data plane is shut down")
	}
	auto := wantsAutoRoutes(cfg)
	if auto && p.auto.src == nil {
		return errors.New("auto_routes needs the embedded registry, which is not running")
	}
	if err := p.applyLocked(withAutoRoutes(cfg, p.auto.services)); err != nil {
		return err
	}
	p.auto.base = cfg
	p.startSweep()
	p.followAutoRoutes(auto)
	return nil
}

// applyLocked is Apply's work; p.mu is held.
func (p *Plane) applyLocked(cfg *config.Config) error {
	ups, err := p.prepareUpstreams(cfg)
	if err != nil {
		return err
	}
	routes, err := p.buildRoutes(cfg, ups)
	if err != nil {
		ups.discard()
		return err
	}
	tr, err := p.prepareTracing(cfg)
	if err != nil {
		for _, r := range routes {
			r.Close()
		}
		ups.discard()
		return err
	}
	discard := func() {
		for _, r := range routes {
			r.Close()
		}
		ups.discard()
		tr.discard()
	}
	hc, err := p.http.Prepare(cfg, func(name string) *pipeline.Route { return routes[name] })
	if err != nil {
		discard()
		return err
	}
	hc.Trace(tr.tracer)
	tc, err := p.tcp.Prepare(tcpSpecs(cfg), cfg.ShutdownTimeout.Std())
	if err != nil {
		hc.Discard()
		discard()
		return err
	}

	// Commit: nothing below can fail.
	p.commitUpstreams(ups)
	hc.Commit()
	tr.commit()
	tc.Commit()
	for _, r := range p.routes {
		r.Close()
	}
	p.routes = routes
	p.applied.Store(&applied{cfg: cfg, routes: routes})
	return nil
}

// buildRoutes builds the pipeline of every http route of cfg over the
// prepared upstreams, each taking over the state of the running route of
// the same name where its settings are unchanged.
func (p *Plane) buildRoutes(cfg *config.Config, ups *upstreamChanges) (map[string]*pipeline.Route, error) {
	routes := map[string]*pipeline.Route{}
	for _, lc := range cfg.Listeners {
		if lc.Protocol != "" && lc.Protocol != "http" {
			continue
		}
		for i := range lc.Routes {
			rc := &lc.Routes[i]
			if rc.Redirect != nil {
				continue // answered by the front end: no pipeline
			}
			if err := p.buildRoute(rc, ups, routes); err != nil {
				for _, r := range routes {
					r.Close()
				}
				return nil, fmt.Errorf("route %q: %w", rc.Name, err)
			}
		}
	}
	return routes, nil
}

// buildRoute builds the pipelines of route rc into routes: one over each
// upstream it sends to, under the keys httpproxy.Prepare looks them up
// by. The first (its upstream, or its split's first member) takes over
// the running route's state; the others share its protections. A mirror
// gets a pipeline of its own, with none of them: a copy is not limited,
// broken or retried on the route's account.
func (p *Plane) buildRoute(rc *config.Route, ups *upstreamChanges, routes map[string]*pipeline.Route) error {
	opts := []pipeline.Option{pipeline.WithMetrics(p.m.pipe), pipeline.WithLogger(p.log), pipeline.WithBackups(p.backup)}
	cfg := pipelineConfig(rc)
	var primary *pipeline.Route
	for i, name := range rc.Upstreams() {
		u := ups.next[name]
		key, share := rc.Name, pipeline.Replacing(p.routes[rc.Name])
		if i > 0 {
			key, share = httpproxy.TargetKey(rc.Name, name), pipeline.Sharing(primary)
		}
		r, err := pipeline.New(rc.Name, cfg, u.up, u.t, append(opts, share)...)
		if err != nil {
			return err
		}
		routes[key] = r
		if i == 0 {
			primary = r
		}
	}
	if m := rc.Mirror; m != nil {
		u := ups.next[m.Upstream]
		r, err := pipeline.New(rc.Name, pipeline.Config{Timeout: cfg.Timeout}, u.up, u.t, opts...)
		if err != nil {
			return err
		}
		routes[httpproxy.MirrorKey(rc.Name)] = r
	}
	return nil
}

// backup finds a backup fallback step's upstream among the running ones.
func (p *Plane) backup(name string) (*upstream.Upstream, pipeline.Transport, bool) {
	u := (*p.byName.Load())[name]
	if u == nil {
		return nil, nil, false
	}
	return u.up, u.t, true
}

// tcpUpstream resolves an upstream's name for a new TCP connection.
func (p *Plane) tcpUpstream(name string) tcpproxy.Upstream {
	if u := (*p.byName.Load())[name]; u != nil {
		return u.up
	}
	return nil
}

// Shutdown stops accepting on every listener, lets in-flight requests and
// connections finish up to the configured shutdown timeout, then closes
// what is left and stops the upstreams. It returns once everything has
// stopped.
func (p *Plane) Shutdown() {
	p.mu.Lock()
	p.closed = true
	p.stopLoops()
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.http.Shutdown() }()
	go func() { defer wg.Done(); p.tcp.Shutdown() }()
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracing.shutdown()
	for _, u := range p.ups {
		u.close()
	}
	for _, r := range p.routes {
		r.Close()
	}
}

// loop is a goroutine of the plane's that runs until its context ends.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when it has returned
}

func startLoop(run func(context.Context)) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		run(ctx)
	}()
	return l
}

// stopLocked ends l and waits for it with p.mu released (l may take p.mu:
// the sweep and an auto-route apply do); p.mu is held.
func (p *Plane) stopLocked(l *loop) {
	l.cancel()
	p.mu.Unlock()
	<-l.done
	p.mu.Lock()
}

// stopLoops stops the auto-route watch and the sweep; p.mu is held.
func (p *Plane) stopLoops() {
	if w := p.auto.watch; w != nil {
		p.auto.watch = nil
		p.stopLocked(w) // it sees closed under p.mu and leaves
	}
	if s := p.sweeping.loop; s != nil {
		p.sweeping.loop = nil
		p.stopLocked(s)
	}
}

// sortedUpstreams lists m's upstreams by name.
func sortedUpstreams(m map[string]*Upstream) []*Upstream {
	list := make([]*Upstream, 0, len(m))
	for _, u := range m {
		list = append(list, u)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	return list
}
