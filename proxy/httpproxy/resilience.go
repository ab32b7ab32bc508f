package httpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/retry"
)

// CodeBreakerOpen is the error code of a request refused because the
// route's circuit breaker is open and no fallback step could answer.
const CodeBreakerOpen = "breaker_open"

// resilienceMetrics are the route breakers' and fallbacks' metrics.
type resilienceMetrics struct {
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	fallbacks          *prometheus.CounterVec
}

func newResilienceMetrics(reg prometheus.Registerer) *resilienceMetrics {
	m := &resilienceMetrics{
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_breaker_state",
			Help: "A route breaker's state: 0 closed, 1 open, 2 half-open.",
		}, []string{"route"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_breaker_transitions_total",
			Help: "Route breaker state changes, by route and the state entered.",
		}, []string{"route", "to"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_fallback_responses_total",
			Help: "Degraded responses served by a fallback step, by route, step and trigger.",
		}, []string{"route", "step", "reason"}),
	}
	reg.MustRegister(m.breakerState, m.breakerTransitions, m.fallbacks)
	return m
}

// routeState is what a route carries across table rebuilds.
type routeState struct {
	key    string // the settings it was built from
	brk    *breaker.Breaker
	fb     *fallback.Chain
	retry  *retry.Policy
	budget *retry.Budget
	p95    *p95Tracker
}

// routeStateKey fingerprints the settings a routeState is built from.
func routeStateKey(rc *config.Route) string {
	b, err := json.Marshal(struct {
		B *breaker.Config
		F *fallback.Config
		R *retry.Policy
	}{rc.Breaker, rc.Fallback, rc.Retry})
	if err != nil {
		return fmt.Sprintf("unkeyed %p", rc) // never matches: build anew
	}
	return string(b)
}

// buildResilience makes a route's breaker and fallback chain. A backup
// step sends to the upstream of that name running at the time.
func (s *Server) buildResilience(rt *route, brk *breaker.Config, fb *fallback.Config) error {
	if brk != nil {
		b, err := breaker.New(*brk)
		if err != nil {
			return err
		}
		name, m, log := rt.name, s.metrics.resilience, s.log
		m.breakerState.WithLabelValues(name).Set(0)
		b.OnStateChange(func(from, to breaker.State, reason string, _ time.Time) {
			m.breakerState.WithLabelValues(name).Set(float64(to))
			m.breakerTransitions.WithLabelValues(name, to.String()).Inc()
			log.Warn("route breaker changed state", "route", name, "from", from.String(), "to", to.String(), "reason", reason)
		})
		rt.brk = b
	}
	if fb != nil {
		c, err := fallback.New(*fb, fallback.SenderFunc(func(ctx context.Context, name string, req *http.Request) (*http.Response, error) {
			u := (*s.byName.Load())[name]
			if u == nil {
				return nil, errors.New("no upstream " + name)
			}
			return sendTo(ctx, u, req)
		}))
		if err != nil {
			return err
		}
		rt.fb = c
	}
	return nil
}

// sendTo sends a body-less copy of req to one endpoint of u (a backup step).
func sendTo(ctx context.Context, u *Upstream, req *http.Request) (*http.Response, error) {
	var info balance.Info
	pick, err := u.bal.Pick(&info)
	if err != nil {
		return nil, err
	}
	out := &outRequest{req: req, uri: requestURI(req), host: req.Host, header: req.Header, length: 0}
	t0 := time.Now()
	resp, err := u.roundTrip(ctx, time.Time{}, pick.Endpoint, out)
	if err != nil {
		pick.Done(endpoint.Outcome{Err: err, Latency: time.Since(t0)})
		return nil, err
	}
	pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: time.Since(t0)})
	return resp, nil
}

// degrade answers through the route's fallback chain for the given trigger.
// It reports false, writing nothing, when there is no chain for it or every
// step failed.
func (h *Handler) degrade(w http.ResponseWriter, r *http.Request, rt *route, trigger fallback.Trigger, reason string) (int, bool) {
	// A status trigger was checked by the caller (Triggers.OnStatus).
	if rt.fb == nil || (trigger != fallback.StatusCode && !rt.fb.Triggers().On(trigger)) {
		return 0, false
	}
	resp, step, err := rt.fb.Serve(r.Context(), r, cacheKey(r), reason, time.Now())
	if err != nil {
		h.log.Debug("fallback chain failed", "route", rt.name, "reason", reason, "error", err)
		return 0, false
	}
	defer resp.Body.Close()
	rt.metrics.m.resilience.fallbacks.WithLabelValues(rt.name, step, reason).Inc()
	copyResponseHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return resp.StatusCode, true
}

// cacheKey is the stale cache's key for a request.
func cacheKey(r *http.Request) string { return r.Method + " " + r.Host + r.URL.RequestURI() }

// staleRecorder tees a good response's body for the stale cache, up to max
// bytes; past that it gives up.
type staleRecorder struct {
	buf  bytes.Buffer
	max  int64
	over bool
}

func (s *staleRecorder) Write(p []byte) (int, error) {
	if !s.over {
		if int64(s.buf.Len()+len(p)) > s.max {
			s.over = true
			s.buf = bytes.Buffer{}
		} else {
			s.buf.Write(p)
		}
	}
	return len(p), nil
}

// hedge runs the first attempt of an idempotent, body-less request and, if
// it has no response header after the hedge delay (and the retry budget
// allows), a second one on another endpoint. The first response wins; the
// other attempt is cancelled and reported as such (a cancellation says
// nothing about its endpoint).
func (h *Handler) hedge(ctx context.Context, rt *route, info *balance.Info, out *outRequest, deadline time.Time, after time.Duration, first balance.Result, t0 time.Time) (*http.Response, balance.Result, time.Time, error) {
	type attempt struct {
		resp *http.Response
		err  error
		pick balance.Result
		t0   time.Time
		idx  int
	}
	results := make(chan attempt, 2)
	var cancels []context.CancelFunc
	launch := func(pick balance.Result, t0 time.Time) {
		actx, cancel := context.WithCancel(ctx)
		idx := len(cancels)
		cancels = append(cancels, cancel)
		go func() {
			resp, err := rt.up.roundTrip(actx, deadline, pick.Endpoint, out)
			results <- attempt{resp, err, pick, t0, idx}
		}()
	}
	launch(first, t0)
	pending := 1
	timer := time.NewTimer(after)
	defer timer.Stop()
	var firstErr *attempt
	for {
		select {
		case <-timer.C:
			if pending == 1 && len(cancels) == 1 && rt.budget.TryWithdraw(time.Now()) {
				info.Tried = append(info.Tried[:0:0], first.Endpoint)
				if second, err := rt.up.bal.Pick(info); err == nil && second.Endpoint != first.Endpoint {
					rt.metrics.m.retries.WithLabelValues(rt.up.name, "hedge").Inc()
					launch(second, time.Now())
					pending++
				} else if err == nil {
					second.Done(endpoint.Outcome{Canceled: true})
				}
			}
			continue
		case a := <-results:
			pending--
			if a.err == nil || pending == 0 {
				// The winner (or the last to fail). The rest is cancelled;
				// whatever it still returns is dropped.
				for i, c := range cancels {
					if i != a.idx {
						c()
					}
				}
				if pending > 0 {
					go func(n int) {
						for ; n > 0; n-- {
							l := <-results
							if l.resp != nil {
								l.resp.Body.Close()
							}
							l.pick.Done(endpoint.Outcome{Err: context.Canceled, Canceled: true})
						}
					}(pending)
				}
				if a.err != nil && firstErr != nil {
					firstErr.pick.Done(endpoint.Outcome{Err: firstErr.err, Latency: time.Since(firstErr.t0)})
				}
				// The winner's context stays live while its body is read;
				// the request's own context ends it.
				return a.resp, a.pick, a.t0, a.err
			}
			// One attempt failed while the other runs: wait for it.
			fa := a
			firstErr = &fa
		}
	}
}

// p95Tracker keeps a route's recent response-header latencies and their
// 95th percentile, recomputed every 64 samples off a ring of the last 256.
type p95Tracker struct {
	mu    sync.Mutex
	ring  [256]time.Duration
	n, i  int
	since int
	cur   atomic.Int64
}

func (t *p95Tracker) add(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring[t.i] = d
	t.i = (t.i + 1) % len(t.ring)
	if t.n < len(t.ring) {
		t.n++
	}
	if t.since++; t.since < 64 {
		return
	}
	t.since = 0
	s := make([]time.Duration, t.n)
	copy(s, t.ring[:t.n])
	slices.Sort(s)
	t.cur.Store(int64(s[t.n*95/100]))
}

// get returns the latest p95, 0 before 64 samples.
func (t *p95Tracker) get() time.Duration { return time.Duration(t.cur.Load()) }
