package httpproxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/registry"
)

// healthState runs an upstream's active checks and passive ejection and
// folds their verdicts into the one state each endpoint has.
//
// Precedence, most severe first: ejected (passive), breaker_open (the
// endpoint's breaker), unhealthy (active),
// probation (passive, back from ejection), healthy. An endpoint that active
// checks find healthy again leaves a passive ejection early, on probation. An endpoint starts
// healthy: with active checks it is taken out after `fall` failures, not
// kept out until `rise` passes, so a reload or a start does not empty a
// pool. Every change of the folded state is logged once, counted, set on
// the endpoint and published to the balancer (Pool.Refresh), which rebuilds
// its snapshot only then.
type healthState struct {
	upstream string
	pool     *endpoint.Pool
	cfg      config.Health
	log      *slog.Logger
	changes  *prometheus.CounterVec

	monitor  *health.Monitor
	detector *health.Detector
	brkCfg   *breaker.Config // per-endpoint breakers; nil for none
	stop     context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	verdict  map[*endpoint.Endpoint]*verdicts
	breakers atomic.Pointer[map[*endpoint.Endpoint]*breaker.Breaker]
}

type verdicts struct {
	activeDown    bool
	activeReason  string
	passive       endpoint.State // Healthy, Ejected or Probation
	passiveReason string
	breakerOpen   bool
	breakerReason string
	// registry is the registry's verdict for an endpoint from discovery
	// ("" or passing when fine).
	registry registry.Health
}

// newHealthState builds (but does not start) the health machinery of an
// upstream. It returns nil when the upstream has neither kind of check.
func newHealthState(upstream string, pool *endpoint.Pool, cfg config.Health, brk *breaker.Config, discovered bool, log *slog.Logger, changes *prometheus.CounterVec) (*healthState, error) {
	if cfg.Active == nil && cfg.Passive == nil && brk == nil && !discovered {
		return nil, nil
	}
	if brk != nil {
		if _, err := breaker.New(*brk); err != nil {
			return nil, fmt.Errorf("breaker: %w", err)
		}
	}
	h := &healthState{upstream: upstream, pool: pool, cfg: cfg, brkCfg: brk, log: log, changes: changes, verdict: map[*endpoint.Endpoint]*verdicts{}}
	empty := map[*endpoint.Endpoint]*breaker.Breaker{}
	h.breakers.Store(&empty)
	if cfg.Active != nil {
		m, err := health.NewMonitor(*cfg.Active, h.onActive, health.WithLogger(log))
		if err != nil {
			return nil, err
		}
		h.monitor = m
	}
	if cfg.Passive != nil {
		opts := []health.DetectorOption{health.WithDetectorOnChange(h.onPassive)}
		if h.monitor != nil {
			// A failure seen on real traffic snaps the adaptive check
			// interval back to its base.
			opts = append(opts, health.WithDetectorFailureSignal(func(ep *endpoint.Endpoint) { h.monitor.Nudge(ep.Address()) }))
		}
		d, err := health.NewDetector(*cfg.Passive, opts...)
		if err != nil {
			return nil, err
		}
		h.detector = d
	}
	return h, nil
}

// start runs the checks and the ejection clock.
func (h *healthState) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.done = cancel, make(chan struct{})
	if h.monitor != nil {
		h.monitor.Start(ctx)
	}
	go func() {
		defer close(h.done)
		if h.detector == nil && h.brkCfg == nil {
			<-ctx.Done()
			return
		}
		// Ejections end, latency outliers are judged, and open endpoint
		// breakers turn half-open (no traffic reaches them to do it) on
		// this tick.
		tick := time.Second
		if h.detector != nil {
			tick = min(tick, h.detector.Config().BaseEjection/20)
		}
		if h.brkCfg != nil {
			openFor := h.brkCfg.OpenFor
			if openFor == 0 {
				openFor = breaker.DefaultOpenFor
			}
			tick = min(tick, openFor/10)
		}
		tick = max(tick, 20*time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if h.detector != nil {
					h.detector.Tick(now)
				}
				for _, b := range *h.breakers.Load() {
					b.State(now)
				}
			}
		}
	}()
}

// sync follows the pool's membership. It must not run under the pool's
// lock: the checks' callbacks take it.
func (h *healthState) sync(eps []*endpoint.Endpoint) {
	h.mu.Lock()
	next := make(map[*endpoint.Endpoint]*verdicts, len(eps))
	for _, ep := range eps {
		v := h.verdict[ep]
		if v == nil {
			v = &verdicts{passive: endpoint.Healthy}
		}
		next[ep] = v
	}
	h.verdict = next
	if h.brkCfg != nil {
		old := *h.breakers.Load()
		brks := make(map[*endpoint.Endpoint]*breaker.Breaker, len(eps))
		for _, ep := range eps {
			b := old[ep]
			if b == nil {
				b, _ = breaker.New(*h.brkCfg) // validated in newHealthState
				ep := ep
				b.OnStateChange(func(_, to breaker.State, reason string, at time.Time) { h.onBreaker(ep, to, reason, at) })
			}
			brks[ep] = b
		}
		h.breakers.Store(&brks)
	}
	h.mu.Unlock()
	var obs endpoint.Observers
	if h.detector != nil {
		h.detector.Update(eps)
		obs = append(obs, h.detector)
	}
	if h.brkCfg != nil {
		obs = append(obs, breakerObserver{h})
	}
	if len(obs) > 0 {
		var o endpoint.Observer = obs
		if len(obs) == 1 {
			o = obs[0]
		}
		for _, ep := range eps {
			ep.SetObserver(o)
		}
	}
	if h.monitor != nil {
		h.monitor.Sync(eps)
	}
}

// close stops the checks and gives every endpoint back its healthy state:
// what no longer watches an endpoint must not keep it out.
func (h *healthState) close(eps []*endpoint.Endpoint, why string) {
	if h.stop != nil {
		h.stop()
		<-h.done
	}
	if h.monitor != nil {
		h.monitor.Close()
	}
	changed := false
	for _, ep := range eps {
		if h.detector != nil || h.brkCfg != nil {
			ep.SetObserver(nil)
		}
		if ep.SetStatus(endpoint.Healthy, why, time.Now()) {
			changed = true
		}
	}
	if changed {
		h.pool.Refresh()
	}
}

// onRegistry records the registry's verdict on ep (discovery).
func (h *healthState) onRegistry(ep *endpoint.Endpoint, verdict registry.Health, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil || v.registry == verdict {
		h.mu.Unlock()
		return
	}
	v.registry = verdict
	h.mu.Unlock()
	h.apply(ep, now)
}

func (h *healthState) onActive(ep *endpoint.Endpoint, healthy bool, reason string, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil {
		h.mu.Unlock()
		return // left the pool
	}
	v.activeDown, v.activeReason = !healthy, reason
	h.mu.Unlock()
	if healthy && h.detector != nil {
		// A passing active check ends a passive ejection early (Envoy's
		// successful_active_health_check_uneject_host): the endpoint goes on
		// probation and proves itself on traffic.
		h.detector.Uneject(ep, "active checks pass ("+reason+")", now)
	}
	h.apply(ep, now)
}

func (h *healthState) onPassive(ep *endpoint.Endpoint, st endpoint.State, reason string, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil {
		h.mu.Unlock()
		return
	}
	v.passive, v.passiveReason = st, reason
	h.mu.Unlock()
	h.apply(ep, now)
}

// breakerObserver feeds every outcome of an endpoint to its breaker. An
// outcome the breaker does not admit (its half-open probe slots are taken)
// is not counted.
type breakerObserver struct{ h *healthState }

func (o breakerObserver) Observe(ep *endpoint.Endpoint, out endpoint.Outcome) {
	b := (*o.h.breakers.Load())[ep]
	if b == nil {
		return
	}
	now := time.Now()
	if t, err := b.Allow(now); err == nil {
		t.Done(out, now)
	}
}

func (h *healthState) onBreaker(ep *endpoint.Endpoint, to breaker.State, reason string, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil {
		h.mu.Unlock()
		return
	}
	v.breakerOpen, v.breakerReason = to == breaker.Open, "breaker "+reason
	h.mu.Unlock()
	h.apply(ep, now)
}

// apply folds ep's verdicts into its state.
func (h *healthState) apply(ep *endpoint.Endpoint, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil {
		h.mu.Unlock()
		return
	}
	st, reason := endpoint.Healthy, ""
	switch {
	case v.passive == endpoint.Ejected:
		st, reason = endpoint.Ejected, v.passiveReason
	case v.breakerOpen:
		st, reason = endpoint.BreakerOpen, v.breakerReason
	case v.activeDown:
		st, reason = endpoint.Unhealthy, v.activeReason
	case v.registry == registry.Critical:
		st, reason = endpoint.Unhealthy, "registry: critical"
	case v.passive == endpoint.Probation:
		st, reason = endpoint.Probation, v.passiveReason
	default:
		reason = v.activeReason
		if v.breakerReason != "" {
			reason = v.breakerReason
		}
		if v.passiveReason != "" && (reason == "" || v.passive == endpoint.Healthy) {
			reason = v.passiveReason
		}
		if reason == "" {
			reason = "healthy"
		}
	}
	changed := ep.SetStatus(st, reason, now)
	h.mu.Unlock()
	if !changed {
		return
	}
	h.log.Info("endpoint state changed", "upstream", h.upstream, "endpoint", ep.Address(), "state", st.String(), "reason", reason)
	h.changes.WithLabelValues(h.upstream, ep.Address(), st.String()).Inc()
	h.pool.Refresh()
}

// panicFeed wraps a balancer's Update: when the share of ready endpoints
// falls below threshold, the balancer gets every endpoint as ready, so the
// survivors are not crushed by the whole load (Envoy's panic threshold).
// Entering and leaving panic is logged.
type panicFeed struct {
	upstream  string
	threshold float64
	update    func(*endpoint.Set)
	log       *slog.Logger
	inPanic   bool // only touched under the pool's lock (subscriber calls)
}

func (p *panicFeed) feed(s *endpoint.Set) {
	if p.threshold <= 0 || len(s.All) == 0 {
		p.update(s)
		return
	}
	share := float64(len(s.Ready)) / float64(len(s.All))
	panicNow := share < p.threshold
	if panicNow != p.inPanic {
		p.inPanic = panicNow
		if panicNow {
			p.log.Warn("upstream in panic: routing to every endpoint", "upstream", p.upstream, "ready", len(s.Ready), "total", len(s.All), "panic_threshold", p.threshold)
		} else {
			p.log.Info("upstream left panic", "upstream", p.upstream, "ready", len(s.Ready), "total", len(s.All))
		}
	}
	if panicNow {
		s = &endpoint.Set{Version: s.Version, All: s.All, Ready: s.All}
	}
	p.update(s)
}
