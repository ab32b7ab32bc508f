package grpcclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

func init() { RegisterBalancers() }

// RegisterBalancers registers every balance policy (balance.Policies) as
// a gRPC balancer named BalancerName(policy). The package does it in its
// init; a program that registers a policy of its own with balance.Register
// calls it again afterwards, from an init function too (gRPC's registry is
// not safe for concurrent use). Registering again is harmless.
func RegisterBalancers() {
	for _, p := range balance.Policies() {
		balancer.Register(lbBuilder{policy: p})
	}
}

// lbBuilder builds the gRPC balancer of one policy.
type lbBuilder struct{ policy string }

func (b lbBuilder) Name() string { return BalancerName(b.policy) }

func (b lbBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	return parseConfig(b.policy, js)
}

func (b lbBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	target := opts.Target.URL.String()
	return &lb{
		cc:     cc,
		policy: b.policy,
		target: target,
		subs:   map[string]*subConn{},
		byConn: map[balancer.SubConn]*subConn{},
		logger: slog.Default().With("target", target, "balancer", b.Name()),
	}
}

// subConn is one resolved address: its gRPC SubConn and the endpoint the
// switchboard balancer sees for it.
type subConn struct {
	sc      balancer.SubConn
	ep      *endpoint.Endpoint
	spec    endpoint.Spec
	state   connectivity.State
	lastErr error
}

// lb is the gRPC balancer around one switchboard balance.Balancer. gRPC
// calls its methods (and the SubConns' state listeners) one at a time, so
// it needs no lock; pickers are immutable snapshots.
type lb struct {
	cc     balancer.ClientConn
	policy string
	target string // for error messages
	logger *slog.Logger

	cfg       *lbConfig
	bal       balance.Balancer
	runCancel context.CancelFunc

	order   []*subConn // resolver order
	subs    map[string]*subConn
	byConn  map[balancer.SubConn]*subConn
	version uint64

	resolverErr error
	closed      bool
}

func (b *lb) UpdateClientConnState(s balancer.ClientConnState) error {
	if b.closed {
		return nil
	}
	cfg, _ := s.BalancerConfig.(*lbConfig)
	if cfg == nil {
		var err error
		if cfg, err = parseConfig(b.policy, nil); err != nil {
			return err // a policy that needs configuration (none does today)
		}
	}
	if !cfg.equal(b.cfg) {
		bal, err := balance.New(cfg.bal)
		if err != nil { // ParseConfig validated it: not expected
			return fmt.Errorf("grpcclient: %w", err)
		}
		b.stopRunner()
		b.cfg, b.bal = cfg, bal
		if r, ok := bal.(balance.Runner); ok {
			ctx, cancel := context.WithCancel(context.Background())
			b.runCancel = cancel
			go func() { _ = r.Run(ctx) }()
		}
	}

	eps := endpoints(s.ResolverState)
	seen := make(map[string]*subConn, len(eps))
	order := make([]*subConn, 0, len(eps))
	for _, r := range eps {
		a, spec := r.addr, r.spec
		if _, dup := seen[a.Addr]; dup {
			continue
		}
		e := b.subs[a.Addr]
		switch {
		case e == nil:
			e = &subConn{spec: spec, ep: endpoint.New(spec), state: connectivity.Idle}
			//lint:ignore SA1019 one address per SubConn, as the deprecation asks for
			sc, err := b.cc.NewSubConn([]resolver.Address{a}, balancer.NewSubConnOptions{
				StateListener: func(st balancer.SubConnState) { b.updateState(e, st) },
			})
			if err != nil {
				b.logger.Warn("grpcclient: cannot create a subchannel", "address", a.Addr, "err", err)
				continue
			}
			e.sc = sc
			b.byConn[sc] = e
			sc.Connect()
		case !sameSpec(e.spec, spec):
			// New weight, zone or metadata: a new endpoint for the policy,
			// over the same connection.
			e.spec, e.ep = spec, endpoint.New(spec)
		}
		seen[a.Addr] = e
		order = append(order, e)
	}
	for addr, e := range b.subs {
		if seen[addr] == nil {
			e.sc.Shutdown()
			delete(b.byConn, e.sc)
		}
	}
	b.subs, b.order = seen, order
	if len(order) == 0 {
		b.resolverErr = errors.New("the resolver reports no instances")
		b.publish()
		return balancer.ErrBadResolverState
	}
	b.resolverErr = nil
	b.publish()
	return nil
}

// resolved is one resolved endpoint: its (first) address and what the
// balancer reads from its attributes.
type resolved struct {
	addr resolver.Address
	spec endpoint.Spec
}

// endpoints lists the resolved endpoints, one address each (the first:
// the switchboard resolver gives one per instance). gRPC fills Endpoints
// from Addresses for resolvers that set only those.
func endpoints(s resolver.State) []resolved {
	out := make([]resolved, 0, len(s.Endpoints))
	for _, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		at, _ := AttributesOf(ep)
		a := ep.Addresses[0]
		out = append(out, resolved{addr: a, spec: endpoint.Spec{Address: a.Addr, Weight: at.Weight, Zone: at.Zone, Meta: at.Meta}})
	}
	return out
}

func sameSpec(a, b endpoint.Spec) bool {
	return Attributes{Weight: a.Weight, Zone: a.Zone, Meta: a.Meta}.Equal(Attributes{Weight: b.Weight, Zone: b.Zone, Meta: b.Meta})
}

func (b *lb) updateState(e *subConn, st balancer.SubConnState) {
	if b.closed || b.byConn[e.sc] != e {
		return
	}
	prev := e.state
	e.state = st.ConnectivityState
	switch e.state {
	case connectivity.Idle:
		e.sc.Connect()
	case connectivity.TransientFailure:
		e.lastErr = st.ConnectionError
	case connectivity.Shutdown:
		return
	}
	if prev != e.state {
		b.publish()
	}
}

// publish hands the balancer a new endpoint snapshot and gRPC a new
// picker over it.
func (b *lb) publish() {
	now := time.Now()
	b.version++
	set := &endpoint.Set{Version: b.version, All: make([]*endpoint.Endpoint, 0, len(b.order))}
	scs := make(map[*endpoint.Endpoint]balancer.SubConn, len(b.order))
	connecting := false
	var lastErr error
	for _, e := range b.order {
		set.All = append(set.All, e.ep)
		switch e.state {
		case connectivity.Ready:
			e.ep.SetStatus(endpoint.Healthy, "subchannel ready", now)
			set.Ready = append(set.Ready, e.ep)
			scs[e.ep] = e.sc
		case connectivity.TransientFailure:
			e.ep.SetStatus(endpoint.Unhealthy, fmt.Sprintf("subchannel failing: %v", e.lastErr), now)
			lastErr = e.lastErr
		default:
			e.ep.SetStatus(endpoint.Unhealthy, "subchannel "+e.state.String(), now)
			connecting = true
		}
	}
	b.bal.Update(set)
	p := &picker{bal: b.bal, scs: newSubConns(scs), cfg: b.cfg}
	state := connectivity.Ready
	switch {
	case len(set.Ready) > 0:
	case connecting:
		state = connectivity.Connecting
		p.err = balancer.ErrNoSubConnAvailable
	default:
		state = connectivity.TransientFailure
		why := b.resolverErr
		if why == nil {
			why = fmt.Errorf("no instance is reachable; last error: %v", lastErr)
		}
		// A plain error, as errNoEndpoint: Unavailable for a fail-fast
		// call, and a WaitForReady call waits for an instance. (%v: a
		// status error wrapped in it would make gRPC end every call.)
		p.err = fmt.Errorf("grpcclient: %s: %v", b.target, why)
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

func (b *lb) ResolverError(err error) {
	if b.closed || len(b.order) > 0 {
		return // keep routing on what we have
	}
	b.resolverErr = err
	if b.bal == nil {
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
			Picker: &picker{err: fmt.Errorf("grpcclient: %s: %v", b.target, err)}})
		return
	}
	b.publish()
}

func (b *lb) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {
	// States arrive through the StateListener of each SubConn.
}

func (b *lb) ExitIdle() {
	for _, e := range b.order {
		if e.state == connectivity.Idle {
			e.sc.Connect()
		}
	}
}

func (b *lb) Close() {
	b.closed = true
	b.stopRunner()
	for _, e := range b.order {
		e.sc.Shutdown()
	}
	b.order, b.subs, b.byConn = nil, nil, nil
}

func (b *lb) stopRunner() {
	if b.runCancel != nil {
		b.runCancel()
		b.runCancel = nil
	}
}
