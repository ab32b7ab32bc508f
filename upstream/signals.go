package upstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/registry"
)

// signals runs an upstream's active checks, passive ejection and endpoint
// breakers, hears the registry's verdicts, and folds them all into the one
// state each endpoint has.
//
// Precedence, most severe first: ejected (passive), breaker_open (the
// endpoint's breaker), unhealthy (active checks, or the registry says
// critical), probation (passive, back from ejection), healthy. An endpoint
// that active checks find healthy again leaves a passive ejection early, on
// probation. An endpoint starts healthy: with active checks it is taken out
// after `fall` failures, not kept out until `rise` passes, so a reload or a
// start does not empty a pool. Every change of the folded state is logged
// once, counted, set on the endpoint and published to the balancer
// (Pool.Refresh), which rebuilds its snapshot only then.
type signals struct {
	u *Upstream

	monitor  *health.Monitor
	detector *health.Detector
	brkCfg   *breaker.Config // per-endpoint breakers; nil for none
	// requirePassing: the registry's warning takes an endpoint out too
	// (Config.RequirePassing).
	requirePassing bool
	stop           context.CancelFunc
	done           chan struct{}

	mu       sync.Mutex
	verdict  map[*endpoint.Endpoint]*verdicts
	breakers atomic.Pointer[map[*endpoint.Endpoint]*breaker.Breaker]
}

// verdicts is what each signal last said of one endpoint.
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

// newSignals builds (but does not start) the health machinery of u. It
// returns nil when there is nothing to judge endpoints by.
func newSignals(u *Upstream, cfg Health, brk *breaker.Config, discovered, requirePassing bool) (*signals, error) {
	if cfg.Passive != nil && cfg.Passive.Off() {
		cfg.Passive = nil
	}
	if cfg.Active == nil && cfg.Passive == nil && brk == nil && !discovered {
		return nil, nil
	}
	if brk != nil {
		if err := brk.Validate(); err != nil {
			return nil, fmt.Errorf("breaker: %w", err)
		}
	}
	h := &signals{u: u, brkCfg: brk, verdict: map[*endpoint.Endpoint]*verdicts{}, requirePassing: requirePassing}
	empty := map[*endpoint.Endpoint]*breaker.Breaker{}
	h.breakers.Store(&empty)
	if cfg.Active != nil {
		m, err := health.NewMonitor(*cfg.Active, h.onActive, health.WithLogger(u.log), health.WithOnPass(h.onPass), health.WithOnCheck(h.onCheck))
		if err != nil {
			return nil, fmt.Errorf("health: %w", err)
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
			return nil, fmt.Errorf("health: %w", err)
		}
		h.detector = d
	}
	return h, nil
}

// start runs the checks and the clock of ejections and breakers.
func (h *signals) start() {
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
		t := time.NewTicker(h.tick())
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

// tick is how often ejections end, latency outliers are judged, and open
// endpoint breakers turn half-open (no traffic reaches them to do it).
func (h *signals) tick() time.Duration {
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
	return max(tick, 20*time.Millisecond)
}

// sync follows the pool's membership and returns the observer that the
// endpoints' outcomes must reach (nil for none): the caller installs it.
// It must not run under the pool's lock: the checks' callbacks take it.
func (h *signals) sync(eps []*endpoint.Endpoint) endpoint.Observer {
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
				b, _ = breaker.New(*h.brkCfg) // validated in newSignals
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
	if h.monitor != nil {
		h.monitor.Sync(eps)
	}
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return obs[0]
	}
	return obs
}

// close stops the checks and gives every endpoint back its healthy state:
// what no longer watches an endpoint must not keep it out.
func (h *signals) close(eps []*endpoint.Endpoint, why string) {
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
		h.u.pool.Refresh()
	}
}

// set records one signal's verdict on ep with fn and folds ep's state
// again; an endpoint that left the pool is ignored.
func (h *signals) set(ep *endpoint.Endpoint, now time.Time, fn func(v *verdicts) bool) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil || !fn(v) {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.fold(ep, now)
}

// onRegistry records the registry's verdict on ep (discovery).
func (h *signals) onRegistry(ep *endpoint.Endpoint, verdict registry.Health, now time.Time) {
	h.set(ep, now, func(v *verdicts) bool {
		if v.registry == verdict {
			return false
		}
		v.registry = verdict
		return true
	})
}

func (h *signals) onActive(ep *endpoint.Endpoint, healthy bool, reason string, now time.Time) {
	if healthy && h.detector != nil {
		// A passing active check ends a passive ejection early (Envoy's
		// successful_active_health_check_uneject_host): the endpoint goes
		// on probation and proves itself on traffic.
		defer h.detector.Uneject(ep, "active checks pass ("+reason+")", now)
	}
	h.set(ep, now, func(v *verdicts) bool {
		v.activeDown, v.activeReason = !healthy, reason
		return true
	})
}

// onCheck counts every active check.
func (h *signals) onCheck(ep *endpoint.Endpoint, err error, took time.Duration) {
	h.u.metrics.checked(h.u.name, ep.Address(), err, took)
}

// onPass hears of every passing active check of a healthy endpoint: one
// that passive health ejected while its checks never failed (an outage
// shorter than fall checks) goes on probation at its next pass, as Envoy
// unejects on every successful check, not only on a change of verdict.
func (h *signals) onPass(ep *endpoint.Endpoint, now time.Time) {
	if h.detector == nil {
		return
	}
	if st, ok := h.detector.State(ep); ok && st == endpoint.Ejected {
		h.detector.Uneject(ep, "an active check passed", now)
	}
}

func (h *signals) onPassive(ep *endpoint.Endpoint, st endpoint.State, reason string, now time.Time) {
	h.set(ep, now, func(v *verdicts) bool {
		v.passive, v.passiveReason = st, reason
		return true
	})
}

func (h *signals) onBreaker(ep *endpoint.Endpoint, to breaker.State, reason string, now time.Time) {
	h.set(ep, now, func(v *verdicts) bool {
		v.breakerOpen, v.breakerReason = to == breaker.Open, "breaker "+reason
		return true
	})
}

// breakerObserver feeds every outcome of an endpoint to its breaker, at
// the outcome's time (out.At when the caller or the policy read the clock
// already). An outcome the breaker does not admit (its half-open probe
// slots are taken) is not counted.
type breakerObserver struct{ h *signals }

func (o breakerObserver) Observe(ep *endpoint.Endpoint, out endpoint.Outcome) {
	b := (*o.h.breakers.Load())[ep]
	if b == nil {
		return
	}
	now := out.Time()
	if t, err := b.Allow(now); err == nil {
		t.Done(out, now)
	}
}

// fold sets ep's state from its verdicts.
func (h *signals) fold(ep *endpoint.Endpoint, now time.Time) {
	h.mu.Lock()
	v := h.verdict[ep]
	if v == nil {
		h.mu.Unlock()
		return
	}
	st, reason := v.state(h.requirePassing)
	changed := ep.SetStatus(st, reason, now)
	h.mu.Unlock()
	if !changed {
		return
	}
	u := h.u
	u.log.Info("endpoint state changed", "upstream", u.name, "endpoint", ep.Address(), "state", st.String(), "reason", reason)
	u.metrics.stateChanged(u.name, ep.Address(), st)
	u.pool.Refresh()
}

// state is the endpoint state the verdicts add up to, and why.
func (v *verdicts) state(requirePassing bool) (endpoint.State, string) {
	switch {
	case v.passive == endpoint.Ejected:
		return endpoint.Ejected, v.passiveReason
	case v.breakerOpen:
		return endpoint.BreakerOpen, v.breakerReason
	case v.activeDown:
		return endpoint.Unhealthy, v.activeReason
	case v.registry == registry.Critical:
		return endpoint.Unhealthy, "registry: critical"
	case v.registry == registry.Warning && requirePassing:
		return endpoint.Unhealthy, "registry: warning"
	case v.passive == endpoint.Probation:
		return endpoint.Probation, v.passiveReason
	}
	reason := v.activeReason
	if v.breakerReason != "" {
		reason = v.breakerReason
	}
	if v.passiveReason != "" && (reason == "" || v.passive == endpoint.Healthy) {
		reason = v.passiveReason
	}
	if reason == "" {
		reason = "healthy"
	}
	return endpoint.Healthy, reason
}
