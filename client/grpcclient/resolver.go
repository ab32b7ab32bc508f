package grpcclient

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/registry"
)

// Scheme is the URI scheme of the switchboard resolver:
// switchboard:///orders resolves the service orders; query parameters
// tag=NAME (repeatable) keep only instances carrying every such tag:
// switchboard:///orders?tag=v2.
const Scheme = "switchboard"

// DefaultReportAfter is how long a resolver waits for its first answer
// from the registry before it tells gRPC why there is none (so that calls
// fail with Unavailable and the registry's error instead of waiting).
const DefaultReportAfter = 5 * time.Second

// ResolverOptions tune a ResolverBuilder. The zero value is usable.
type ResolverOptions struct {
	// Discovery tunes the cached view (cache directory, empty-answer
	// guard, backoff). Its Logger defaults to Logger.
	Discovery discovery.Options
	// IncludeUnhealthy resolves every instance, not only those whose
	// registry health is passing. Default false.
	IncludeUnhealthy bool
	// ReportAfter: see DefaultReportAfter. Default 5s.
	ReportAfter time.Duration
	// Logger gets a line when a target's view turns stale or fresh again.
	// Default slog.Default().
	Logger *slog.Logger
}

// ResolverBuilder resolves switchboard:///SERVICE targets over a registry
// through a discovery view: updates are pushed to gRPC when the registry
// reports a change, and while the registry is down the last known
// instances keep serving. Views of the same service are shared by every
// ClientConn of the builder. Use it per ClientConn with
// grpc.WithResolvers, or for the whole process with Register.
type ResolverBuilder struct {
	d           *discovery.Discovery
	owned       bool
	passingOnly bool
	reportAfter time.Duration
	logger      *slog.Logger
}

// NewResolverBuilder returns a builder over reg: any registry.Discoverer,
// such as registry/consul pointed at a Consul agent or at switchboard's
// embedded registry, registry/etcd, registry/dns or the embedded
// registry's own Discoverer. Close it when done.
func NewResolverBuilder(reg registry.Discoverer, opts ResolverOptions) (*ResolverBuilder, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	dopts := opts.Discovery
	if dopts.Logger == nil {
		dopts.Logger = logger
	}
	d, err := discovery.New(reg, dopts)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: %w", err)
	}
	b := FromDiscovery(d, opts)
	b.owned = true
	return b, nil
}

// FromDiscovery returns a builder over an existing Discovery (shared with
// an HTTP client or the proxy, say); opts.Discovery is not read, and
// Close leaves d open.
func FromDiscovery(d *discovery.Discovery, opts ResolverOptions) *ResolverBuilder {
	b := &ResolverBuilder{d: d, passingOnly: !opts.IncludeUnhealthy, reportAfter: opts.ReportAfter, logger: opts.Logger}
	if b.reportAfter <= 0 {
		b.reportAfter = DefaultReportAfter
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	return b
}

// Register makes b the process-wide resolver of the switchboard scheme,
// so that grpc.NewClient("switchboard:///orders") needs no option. Like
// gRPC's own resolver.Register, call it only at start-up (from init or
// main, before any ClientConn), not concurrently with gRPC.
func Register(b *ResolverBuilder) { resolver.Register(b) }

// Scheme implements resolver.Builder.
func (b *ResolverBuilder) Scheme() string { return Scheme }

// Close stops the builder's discovery (when NewResolverBuilder made it).
// Close the ClientConns first.
func (b *ResolverBuilder) Close() {
	if b.owned {
		b.d.Close()
	}
}

// Query returns the registry query a target stands for.
func Query(target resolver.Target) (registry.Query, error) {
	svc := strings.Trim(target.URL.Path, "/")
	if svc == "" {
		svc = target.URL.Opaque
	}
	if svc == "" || strings.Contains(svc, "/") {
		return registry.Query{}, fmt.Errorf("grpcclient: target %q: want %s:///SERVICE", target.URL.String(), Scheme)
	}
	return registry.Query{Service: svc, Tags: target.URL.Query()["tag"]}, nil
}

// Build implements resolver.Builder.
func (b *ResolverBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	q, err := Query(target)
	if err != nil {
		return nil, err
	}
	q.PassingOnly = b.passingOnly
	ctx, cancel := context.WithCancel(context.Background())
	r := &viewResolver{
		cc:     cc,
		view:   b.d.Watch(q),
		cancel: cancel,
		logger: b.logger.With("service", q.Service),
		done:   make(chan struct{}),
	}
	r.unsubscribe = r.view.Subscribe(r.push)
	go r.reportUntilReady(ctx, b.reportAfter)
	return r, nil
}

// viewResolver feeds one ClientConn from one discovery view.
type viewResolver struct {
	cc          resolver.ClientConn
	view        *discovery.View
	unsubscribe func()
	cancel      context.CancelFunc
	logger      *slog.Logger
	done        chan struct{}

	mu    sync.Mutex // serialises push against Close
	stale bool
	shut  bool
}

// push hands a snapshot to gRPC. Subscribe delivers snapshots one at a
// time, in order.
func (r *viewResolver) push(s discovery.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shut {
		return
	}
	if s.Stale != r.stale {
		r.stale = s.Stale
		if s.Stale {
			r.logger.Warn("grpcclient: serving a stale view of the registry", "instances", len(s.Instances), "from_cache", s.FromCache, "err", s.LastError)
		} else {
			r.logger.Info("grpcclient: registry view is fresh again", "instances", len(s.Instances))
		}
	}
	// Endpoints carry the attributes; Addresses are for balancers that
	// still read only those.
	st := resolver.State{
		Endpoints: make([]resolver.Endpoint, len(s.Instances)),
		Addresses: make([]resolver.Address, len(s.Instances)),
	}
	for i, in := range s.Instances {
		a := resolver.Address{Addr: in.HostPort()}
		st.Addresses[i] = a
		st.Endpoints[i] = SetAttributes(resolver.Endpoint{Addresses: []resolver.Address{a}},
			Attributes{ID: in.ID, Weight: in.Weight, Zone: in.Zone, Meta: in.Meta})
	}
	// An error here is the balancer refusing an empty list; it has put up
	// a picker that says so.
	_ = r.cc.UpdateState(st)
}

// reportUntilReady tells gRPC why there are no addresses yet, every
// interval, until the view has its first snapshot.
func (r *viewResolver) reportUntilReady(ctx context.Context, every time.Duration) {
	defer close(r.done)
	for {
		wctx, cancel := context.WithTimeout(ctx, every)
		err := r.view.Ready(wctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if !r.shut {
			r.cc.ReportError(fmt.Errorf("grpcclient: no answer from the registry yet: %w", err))
		}
		r.mu.Unlock()
	}
}

// ResolveNow implements resolver.Resolver. The view is watched, so there
// is nothing to poll.
func (r *viewResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close implements resolver.Resolver.
func (r *viewResolver) Close() {
	r.cancel()
	r.unsubscribe()
	r.mu.Lock()
	r.shut = true
	r.mu.Unlock()
	r.view.Close()
	<-r.done
}
