package httpproxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// A route that sends to several upstreams (a split, a canary) has one
// pipeline per upstream. The caller of Prepare gives them by these keys:
// the route's name for its primary upstream (its upstream, or its split's
// first member), TargetKey for each other one, and MirrorKey for the
// pipeline its copies go through. The members of one route share its
// protections (pipeline.Sharing); the mirror's pipeline has none of them.

// TargetKey is the key of route's pipeline over upstream, when upstream is
// not the route's primary one.
func TargetKey(route, upstream string) string { return route + "\x00" + upstream }

// MirrorKey is the key of the pipeline route's mirror copies go through.
func MirrorKey(route string) string { return route + "\x00>mirror" }

// target is one upstream a route sends requests to: its pipeline, the
// route's series for it and the sticky cookie its endpoints are pinned by.
type target struct {
	pipe    *pipeline.Route
	metrics *httpmetrics.Route
	sticky  *stickyCookie // nil: none
	// picked counts the split decisions for it, by how they were made
	// (weight, key, canary); nil series count nothing.
	picked [3]prometheus.Counter
}

// The ways a split decision is made, indexes of target.picked; byNone:
// no split decision (a route without one).
const (
	byWeight = iota
	byKey
	byCanary
	byNone = -1
)

var pickedBy = [3]string{"weight", "key", "canary"}

func (tg *target) count(by int) {
	if c := tg.picked[by]; c != nil {
		c.Inc()
	}
}

// traffic is what a route does beyond sending to one upstream: a weighted
// split, a canary, a mirror. nil on a plain route.
type traffic struct {
	members []*target // the split's, in order; members[0] is the route's own target
	cum     []uint64  // cumulative weights of members
	total   uint64
	key     *balance.HashKey // split_sticky's; nil: a random choice per request
	canary  *canary
	mirror  *mirror
}

// canary is the opt-in rule of a route's canary.
type canary struct {
	target  *target
	headers [][2]string // canonical name, exact value
	cookies [][2]string // name, exact value
}

func (c *canary) match(r *http.Request) bool {
	for _, h := range c.headers {
		if v := r.Header[h[0]]; len(v) > 0 && v[0] == h[1] {
			return true
		}
	}
	for _, ck := range c.cookies {
		if v, ok := cookieValue(r.Header, ck[0]); ok && v == ck[1] {
			return true
		}
	}
	return false
}

// pick chooses the target of request r on route rt: the route's own on a
// plain route; the canary when r opts in; else a split member, by the
// hash of r's key when the split is sticky and r has one, or at random by
// weight. It allocates nothing (a cookie or header key is read in place).
func (rt *route) pick(r *http.Request) *target {
	tg, by := rt.choose(r)
	if by != byNone {
		tg.count(by)
	}
	return tg
}

// choose is pick without counting the decision (explain uses it): the
// target and how it was chosen, byNone for a route without a split.
func (rt *route) choose(r *http.Request) (*target, int) {
	tr := rt.traffic
	if tr == nil {
		return &rt.target, byNone
	}
	if c := tr.canary; c != nil && c.match(r) {
		return c.target, byCanary
	}
	if len(tr.members) < 2 {
		return &rt.target, byNone
	}
	var x uint64
	by := byWeight
	if tr.key != nil {
		if k, ok := splitKey(tr.key, r); ok {
			x, by = mix(hashString(k))%tr.total, byKey
		} else {
			x = rand.Uint64N(tr.total)
		}
	} else {
		x = rand.Uint64N(tr.total)
	}
	i := 0
	for x >= tr.cum[i] {
		i++
	}
	return tr.members[i], by
}

// splitKey is r's key for a sticky split; a cookie is read without
// parsing every cookie of the request.
func splitKey(k *balance.HashKey, r *http.Request) (string, bool) {
	if k.Source == balance.HashKeyCookie {
		return cookieValue(r.Header, k.Name)
	}
	return k.FromRequest(r)
}

// hashString is FNV-1a over s.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix spreads FNV's bits over the whole word (splitmix64's finalizer), so
// that the remainder by a split's total is even.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// cookieValue finds cookie name among h's Cookie fields without
// allocating: the first one of that name, its value unquoted.
func cookieValue(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
		for len(line) > 0 {
			var part string
			if i := strings.IndexByte(line, ';'); i >= 0 {
				part, line = line[:i], line[i+1:]
			} else {
				part, line = line, ""
			}
			part = strings.TrimSpace(part)
			k, v, ok := strings.Cut(part, "=")
			if !ok || k != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v, true
		}
	}
	return "", false
}

// TrafficMetrics are the metrics of traffic splits and mirrors. Per-route
// series are resolved when a table is built.
type TrafficMetrics struct {
	split   *prometheus.CounterVec
	mirrors *prometheus.CounterVec
}

// NewTrafficMetrics creates the metrics and registers them with reg.
func NewTrafficMetrics(reg prometheus.Registerer) *TrafficMetrics {
	m := &TrafficMetrics{
		split: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_split_decisions_total",
			Help: "Requests of split or canary routes sent to each upstream, by route, upstream and how it was chosen (weight, key, canary).",
		}, []string{"route", "upstream", "by"}),
		mirrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_mirror_requests_total",
			Help: "Mirrored copies of requests, by route, mirror upstream and result (sent: answered; failed: no answer; dropped: over max_concurrency; skipped: body too large, of unknown length, or the request refused).",
		}, []string{"route", "upstream", "result"}),
	}
	reg.MustRegister(m.split, m.mirrors)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// routes and upstreams that are gone.
func (m *TrafficMetrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.split.MetricVec, m.mirrors.MetricVec}
}

// trafficState is what a Server's tables need for their traffic parts:
// the metrics, and the owner of mirror copies in flight (Shutdown ends and
// waits for them).
type trafficState struct {
	m      *TrafficMetrics
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // orders enter and stop
	closed bool
	wg     sync.WaitGroup
}

// enter counts a mirror copy starting, unless the server is shut down.
func (ts *trafficState) enter() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return false
	}
	ts.wg.Add(1)
	return true
}

func newTrafficState() *trafficState {
	ctx, cancel := context.WithCancel(context.Background())
	return &trafficState{ctx: ctx, cancel: cancel}
}

// stop lets the mirror copies in flight finish for up to drain, then
// ends those left and waits for them. No copy starts after it.
func (ts *trafficState) stop(drain time.Duration) {
	ts.mu.Lock()
	ts.closed = true
	ts.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ts.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	ts.cancel()
	<-done
}

// SetTrafficMetrics makes the tables of later changes count split
// decisions and mirror copies in m.
func (s *Server) SetTrafficMetrics(m *TrafficMetrics) {
	s.mu.Lock()
	s.traffic.m = m
	s.mu.Unlock()
}

// addTraffic gives the routes of table t, built from listener lc of cfg,
// their split members, canary, mirror and sticky cookies. pipes gives the
// pipelines by the keys above.
func (t *Table) addTraffic(cfg *config.Config, lc *config.Listener, pipes func(string) *pipeline.Route, m *Metrics, ts *trafficState) {
	for i := range lc.Routes {
		rc, rt := &lc.Routes[i], t.routes[i]
		ups := rc.Upstreams()
		rt.sticky = newStickyCookie(stickyConfig(cfg, rc, ups[0]), rt.pipe)
		if len(ups) == 1 && rc.Mirror == nil {
			continue
		}
		tr := &traffic{}
		targets := map[string]*target{ups[0]: &rt.target}
		for _, up := range ups[1:] {
			pipe := pipes(TargetKey(rc.Name, up))
			targets[up] = &target{pipe: pipe, metrics: m.Route(lc.Name, rc.Name, up), sticky: newStickyCookie(stickyConfig(cfg, rc, up), pipe)}
		}
		if ts.m != nil && (len(rc.Split) > 0 || rc.Canary != nil) {
			for up, tg := range targets {
				for by, name := range pickedBy {
					tg.picked[by] = ts.m.split.WithLabelValues(rc.Name, up, name)
				}
			}
		}
		for _, sm := range rc.Split {
			tr.total += uint64(sm.Weight)
			tr.cum = append(tr.cum, tr.total)
			tr.members = append(tr.members, targets[sm.Upstream])
		}
		if s := rc.SplitSticky; s != nil {
			if k, err := balance.ParseHashKey(s.Key); err == nil {
				tr.key = &k
			}
		}
		if c := rc.Canary; c != nil {
			tr.canary = &canary{target: targets[c.Upstream]}
			for _, name := range sortedNames(c.Header) {
				tr.canary.headers = append(tr.canary.headers, [2]string{http.CanonicalHeaderKey(name), c.Header[name]})
			}
			for _, name := range sortedNames(c.Cookie) {
				tr.canary.cookies = append(tr.canary.cookies, [2]string{name, c.Cookie[name]})
			}
		}
		if mc := rc.Mirror; mc != nil {
			var timeout time.Duration
			if rc.Timeout != nil {
				timeout = rc.Timeout.Std()
			}
			tr.mirror = newMirror(rc.Name, mc, pipes(MirrorKey(rc.Name)), timeout, ts)
		}
		rt.traffic = tr
	}
}

// stickyConfig is the sticky cookie of route rc's target over upstream
// up: the route's own, else the upstream's; nil for none.
func stickyConfig(cfg *config.Config, rc *config.Route, up string) *config.StickyCookie {
	if rc.StickyCookie != nil {
		return rc.StickyCookie
	}
	if u := cfg.Upstreams[up]; u != nil {
		return u.StickyCookie
	}
	return nil
}

// series calls fn with the labels of the series of rt's targets other
// than its own.
func (tr *traffic) series(rt *route, fn func(listener, route, upstream string)) {
	seen := map[*target]bool{&rt.target: true}
	each := func(tg *target) {
		if tg != nil && !seen[tg] {
			seen[tg] = true
			fn(tg.metrics.Labels())
		}
	}
	for _, tg := range tr.members {
		each(tg)
	}
	if tr.canary != nil {
		each(tr.canary.target)
	}
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// mirrorTimeout bounds a copy whose route has no timeout.
const mirrorTimeout = 60 * time.Second
