package balance

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/field"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// DynamicWeightName is the name of the load-report-driven weighted policy.
const DynamicWeightName = "dynamic_weight"

func init() {
	Register(DynamicWeightName, func(cfg Config) (Balancer, error) {
		unused := cfg.unused("slow_start", "decay_window", "dynamic_weight")
		b, err := NewDynamicWeight(cfg)
		if err := errors.Join(unused, err); err != nil {
			return nil, err
		}
		return b, nil
	})
}

// Default coefficients of dynamic_weight's score.
const (
	DefaultCPUCoefficient     = 0.4
	DefaultMemCoefficient     = 0.3
	DefaultLatencyCoefficient = 0.2
	DefaultErrorsCoefficient  = 0.1
)

// The two ends of a custom factor's scale (DynamicFactor.Prefer).
const (
	PreferLow  = "low"  // lower values are better (the default)
	PreferHigh = "high" // higher values are better
)

const (
	maxFactors     = 16              // custom factors of one balancer
	maxFactorName  = 32              // bytes in a factor's name
	pollWorkers    = 8               // concurrent polls in one round
	maxPollTimeout = 2 * time.Second // bound on one poll request
	maxReportBytes = 512             // bound on a polled body
)

// DynamicWeight draws endpoints at random in proportion to their configured
// weight times a score computed from their reported load and the balancer's
// own observations (see DynamicWeightConfig).
//
// cpu, mem and the custom Factors come from load reports: the proxy
// passes the response header (DynamicWeightConfig.Header) in
// Outcome.LoadReport, or Run polls PollPath on every ready endpoint. A
// report reads "cpu=0.42, mem=0.31, queue_depth=17"; cpu and mem are
// fractions in [0, 1], a factor's value is a decimal >= 0, keys that are
// neither are ignored, and a malformed or out-of-range report is ignored
// whole and logged once per endpoint. An endpoint that never reported cpu
// or mem counts as idle on that term; a report without cpu or mem keeps
// the last value. A custom factor is taken from the latest report alone:
// one that the report lacks is neutral (no term) until a report has it. Latency (an
// EWMA of successful requests) and the error rate (transport errors and
// 5xx, decayed) are observed from Done; DecayWindow is their time
// constant.
//
// Pick draws from an immutable alias table. The table is rebuilt off the
// pick path: at most once per Refresh from a Done that finds it due, on
// every Update and slow-start step, and by Run's ticker. Run is needed only
// for polling, or to refresh weights while no traffic flows.
type DynamicWeight struct {
	rng
	p     *dwParams
	rb    *rebuilder
	snap  atomic.Pointer[dwSnap]
	sides map[*endpoint.Endpoint]*dwSide // guarded by rb.mu
	due   atomic.Int64                   // clock when a Done should next refresh the table

	client    *http.Client
	afterPoll func() // a test hook, called after each poll round
}

type dwParams struct {
	cpu, mem, lat, errs float64    // coefficients, summing to 1
	factors             []dwFactor // custom factors, by name, coefficients in the same unit
	latCap              float64    // ns
	errCap              float64
	minW                float64
	tau                 float64 // ns
	rate                float64 // 1/tau: a multiply on the request path, not a divide
	refresh             time.Duration
	header              string
	pollPath            string
	pollInterval        time.Duration
	clock               clock.Clock  // clock.Real; tests set it and rb.clock together (useClock)
	log                 *slog.Logger // nil: slog.Default(); a test seam
}

// dwFactor is a custom factor as the score uses it.
type dwFactor struct {
	name string
	coef float64 // relative to cpu+mem+latency+errors = 1
	max  float64
	high bool // PreferHigh
}

type dwSnap struct {
	weightedSnap
	sides []*dwSide
	w     []float64 // the weights drawn from, for tests and introspection
}

// dwSide is one endpoint's reports and observations and its prebuilt Done.
type dwSide struct {
	ep     *endpoint.Endpoint
	d      *DynamicWeight
	cpu    atomic.Uint64   // float64 bits
	mem    atomic.Uint64   // float64 bits
	fac    []atomic.Uint64 // custom factors' values, float64 bits; NaN: not in the latest report
	obs    ewma2           // latency (ns) of successes; fraction of failures
	warned atomic.Bool     // a bad report was logged
	done   func(endpoint.Outcome)
}

// NewDynamicWeight returns an empty dynamic_weight balancer, or why cfg is
// not valid for it.
func NewDynamicWeight(cfg Config) (*DynamicWeight, error) {
	errs := []error{cfg.negative("slow_start", "decay_window")}
	c := cfg.DynamicWeight
	p := &dwParams{
		cpu: c.CPU, mem: c.Mem, lat: c.Latency, errs: c.Errors,
		latCap:       float64(orDuration(c.LatencyCap, DefaultLatencyCap)),
		errCap:       c.ErrorCap,
		minW:         c.MinWeight,
		tau:          float64(orDuration(cfg.DecayWindow, DefaultDecayWindow)),
		rate:         1 / float64(orDuration(cfg.DecayWindow, DefaultDecayWindow)),
		refresh:      orDuration(c.Refresh, DefaultRefresh),
		header:       c.Header,
		pollPath:     c.PollPath,
		pollInterval: orDuration(c.PollInterval, DefaultPollInterval),
		clock:        clock.Real,
	}
	bad := func(key, format string, a ...any) {
		errs = append(errs, field.Errorf("dynamic_weight."+key, format, a...))
	}
	coefOK := true
	for _, k := range []struct {
		name string
		v    float64
	}{{"cpu", p.cpu}, {"mem", p.mem}, {"latency", p.lat}, {"errors", p.errs}} {
		if !(k.v >= 0) || math.IsInf(k.v, 1) {
			bad(k.name, "must be >= 0, got %v", k.v)
			coefOK = false
		}
	}
	scale := 1.0
	if sum := p.cpu + p.mem + p.lat + p.errs; sum == 0 {
		p.cpu, p.mem, p.lat, p.errs = DefaultCPUCoefficient, DefaultMemCoefficient, DefaultLatencyCoefficient, DefaultErrorsCoefficient
	} else if coefOK {
		scale = 1 / sum
		p.cpu, p.mem, p.lat, p.errs = p.cpu/sum, p.mem/sum, p.lat/sum, p.errs/sum
	}
	p.factors, errs = factorParams(c.Factors, scale, errs)
	if c.LatencyCap < 0 {
		bad("latency_cap", "must be positive, got %v", c.LatencyCap)
	}
	switch {
	case c.ErrorCap == 0:
		p.errCap = DefaultErrorCap
	case !(c.ErrorCap > 0 && c.ErrorCap <= 1):
		bad("error_cap", "must be in (0, 1], got %v", c.ErrorCap)
	}
	switch {
	case c.MinWeight == 0:
		p.minW = DefaultMinWeight
	case !(c.MinWeight > 0 && c.MinWeight <= 1):
		bad("min_weight", "must be in (0, 1], got %v", c.MinWeight)
	}
	if p.header == "" {
		p.header = DefaultLoadHeader
	} else if !isToken(p.header) {
		bad("header", "%q is not a valid header name", p.header)
	}
	if p.pollPath != "" && !strings.HasPrefix(p.pollPath, "/") {
		bad("poll_path", "must start with /, got %q", p.pollPath)
	}
	if c.PollInterval < 0 {
		bad("poll_interval", "must be positive, got %v", c.PollInterval)
	} else if c.PollInterval != 0 && p.pollPath == "" {
		bad("poll_interval", "needs poll_path")
	}
	if c.Refresh < 0 {
		bad("refresh", "must be positive, got %v", c.Refresh)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d := &DynamicWeight{
		p:      p,
		sides:  map[*endpoint.Endpoint]*dwSide{},
		client: &http.Client{Timeout: min(p.pollInterval, maxPollTimeout)},
	}
	d.snap.Store(&dwSnap{})
	d.rb = newRebuilder(cfg.SlowStart, d.build)
	return d, nil
}

// factorParams checks the custom factors and returns them sorted by name,
// their coefficients multiplied by scale; problems are appended to errs.
func factorParams(fs map[string]DynamicFactor, scale float64, errs []error) ([]dwFactor, []error) {
	if len(fs) > maxFactors {
		return nil, append(errs, field.Errorf("dynamic_weight.factors", "has %d factors, at most %d are allowed", len(fs), maxFactors))
	}
	var out []dwFactor
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		f := fs[name]
		key := "dynamic_weight.factors." + name
		if !validFactorName(name) {
			errs = append(errs, field.Errorf("dynamic_weight.factors", "%q is not a valid factor name: lower-case letters, digits and _, starting with a letter, at most %d bytes", name, maxFactorName))
			continue
		}
		switch name {
		case "cpu", "mem", "latency", "errors":
			errs = append(errs, field.Errorf("dynamic_weight.factors", "%q is built in: set dynamic_weight.%s instead", name, name))
			continue
		}
		ok := true
		if !(f.Coefficient > 0) || math.IsInf(f.Coefficient, 1) {
			errs = append(errs, field.Errorf(key+".coefficient", "must be > 0, got %v", f.Coefficient))
			ok = false
		}
		m := f.Max
		if m == 0 {
			m = 1
		} else if !(m > 0) || math.IsInf(m, 1) {
			errs = append(errs, field.Errorf(key+".max", "must be > 0, got %v", f.Max))
			ok = false
		}
		switch f.Prefer {
		case "", PreferLow, PreferHigh:
		default:
			errs = append(errs, field.Errorf(key+".prefer", "%q is not one of %s, %s", f.Prefer, PreferLow, PreferHigh))
			ok = false
		}
		if ok {
			out = append(out, dwFactor{name: name, coef: f.Coefficient * scale, max: m, high: f.Prefer == PreferHigh})
		}
	}
	return out, errs
}

// validFactorName reports whether s is a factor name: [a-z][a-z0-9_]*, at
// most maxFactorName bytes.
func validFactorName(s string) bool {
	if s == "" || len(s) > maxFactorName || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Update implements Balancer.
func (d *DynamicWeight) Update(set *endpoint.Set) { d.rb.update(set) }

func (d *DynamicWeight) build(set *endpoint.Set, factors []float64) {
	now := monoNow(d.p.clock)
	next := make(map[*endpoint.Endpoint]*dwSide, len(set.All))
	side := func(ep *endpoint.Endpoint) *dwSide {
		s := d.sides[ep]
		if s == nil {
			s = next[ep]
		}
		if s == nil {
			s = &dwSide{ep: ep, d: d, fac: make([]atomic.Uint64, len(d.p.factors))}
			for i := range s.fac {
				s.fac[i].Store(notReported)
			}
			s.obs.stamp.Store(now) // the averages start at 0 now, not at the first outcome
			s.done = s.release
		}
		next[ep] = s
		return s
	}
	for _, ep := range set.All {
		side(ep)
	}
	s := &dwSnap{weightedSnap: weightedSnap{eps: set.Ready}, sides: make([]*dwSide, len(set.Ready))}
	s.w = effWeights(set.Ready, factors)
	for i, ep := range set.Ready {
		s.sides[i] = side(ep)
		s.w[i] *= s.sides[i].score()
	}
	d.sides = next
	s.s = newSampler(s.w)
	d.snap.Store(s)
	d.due.Store(now + int64(d.p.refresh))
}

// notReported is the value of a custom factor that the latest report
// lacks: NaN's bits.
var notReported = math.Float64bits(math.NaN())

// score is the endpoint's share of its configured weight, in [minW, 1].
func (s *dwSide) score() float64 {
	p := s.d.p
	cpu := math.Float64frombits(s.cpu.Load())
	mem := math.Float64frombits(s.mem.Load())
	lat := min(math.Float64frombits(s.obs.lat.Load()), p.latCap)
	errs := min(math.Float64frombits(s.obs.errs.Load()), p.errCap)
	v := p.cpu*(1-cpu) + p.mem*(1-mem) + p.lat*(1-lat/p.latCap) + p.errs*(1-errs/p.errCap)
	sum := 1.0 // of the coefficients of the terms in v
	for i, f := range p.factors {
		x := math.Float64frombits(s.fac[i].Load())
		if math.IsNaN(x) {
			continue // neutral: no term
		}
		frac := min(x, f.max) / f.max
		if !f.high {
			frac = 1 - frac
		}
		v += f.coef * frac
		sum += f.coef
	}
	return max(v/sum, p.minW)
}

// Pick implements Balancer.
func (d *DynamicWeight) Pick(info *Info) (Result, error) {
	s := d.snap.Load()
	if len(s.eps) == 0 {
		return Result{}, ErrNoEndpoint
	}
	i := s.index(&d.rng, info)
	return pickWith(s.eps[i], s.sides[i].done), nil
}

// release is the endpoint's Done: observe as of o.At (the clock when it
// is unset), then release the endpoint.
func (s *dwSide) release(o endpoint.Outcome) {
	if o.At == 0 {
		o.At = monoNow(s.d.p.clock)
	}
	now := o.At
	s.observe(now, &o)
	s.ep.Release(o)
	s.d.maybeRefresh(now)
}

// observe folds one outcome at now into the endpoint's state. It takes o
// by pointer: copying an Outcome into a call that does not inline costs
// more than the rest of a Done here.
func (s *dwSide) observe(now int64, o *endpoint.Outcome) {
	if o.LoadReport != "" {
		s.report(o.LoadReport)
	}
	if !o.Canceled {
		s.obs.observe(now, !failed(o), o.Latency, s.d.p.rate)
	}
}

// report applies a load report, or logs (once) why it is ignored.
func (s *dwSide) report(raw string) {
	var facs [maxFactors]float64
	cpu, mem, err := parseLoadReport(raw, s.d.p.factors, &facs)
	if err != nil {
		if s.warned.CompareAndSwap(false, true) {
			log := s.d.p.log
			if log == nil {
				log = slog.Default()
			}
			log.Warn("balance: ignoring load report", "policy", DynamicWeightName,
				"endpoint", s.ep.Address(), "report", raw, "reason", err.Error(),
				"note", "logged once per endpoint")
		}
		return
	}
	if cpu >= 0 {
		s.cpu.Store(math.Float64bits(cpu))
	}
	if mem >= 0 {
		s.mem.Store(math.Float64bits(mem))
	}
	for i := range s.fac {
		s.fac[i].Store(math.Float64bits(facs[i]))
	}
}

// maybeRefresh rebuilds the table if it is due, in the one Done that wins
// the race for it. The check inlines into every Done; the rest does not.
func (d *DynamicWeight) maybeRefresh(now int64) {
	if due := d.due.Load(); now >= due {
		d.refreshAt(now, due)
	}
}

func (d *DynamicWeight) refreshAt(now, due int64) {
	if d.due.CompareAndSwap(due, now+int64(d.p.refresh)) {
		d.rb.tryRebuildAt(d.p.clock.Now())
	}
}

// Errors of parseLoadReport; static so that a backend sending garbage on
// every response costs no allocation.
var (
	errReportSyntax = errors.New(`want "cpu=F, mem=F, FACTOR=V" with F in [0, 1] and V >= 0`)
	errReportRange  = errors.New("cpu or mem out of [0, 1]")
	errReportEmpty  = errors.New("no cpu, mem or configured factor value")
)

// parseLoadReport reads "cpu=0.42, mem=0.31, queue_depth=17". A cpu or
// mem absent from the report is returned as -1; facs[i] is the value of
// factors[i], NaN when absent. Other keys are ignored.
func parseLoadReport(s string, factors []dwFactor, facs *[maxFactors]float64) (cpu, mem float64, err error) {
	cpu, mem = -1, -1
	found := false
	for i := range factors {
		facs[i] = math.NaN()
	}
	for len(s) > 0 {
		var item string
		item, s, _ = strings.Cut(s, ",")
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return -1, -1, errReportSyntax
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		f := -1
		if k != "cpu" && k != "mem" {
			if f = factorIndex(factors, k); f < 0 {
				continue
			}
		}
		if !isDecimal(v) {
			return -1, -1, errReportSyntax
		}
		x, perr := strconv.ParseFloat(v, 64)
		if perr != nil {
			return -1, -1, errReportSyntax
		}
		switch {
		case f >= 0:
			facs[f] = x
			found = true
		case x > 1:
			return -1, -1, errReportRange
		case k == "cpu":
			cpu = x
		default:
			mem = x
		}
	}
	if cpu < 0 && mem < 0 && !found {
		return -1, -1, errReportEmpty
	}
	return cpu, mem, nil
}

// factorIndex returns the index of the factor named k, or -1.
func factorIndex(factors []dwFactor, k string) int {
	for i := range factors {
		if factors[i].name == k {
			return i
		}
	}
	return -1
}

// isDecimal reports whether s is digits with at most one '.', and at least
// one digit: what ParseFloat accepts without allocating an error.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1 && len(s) <= 32
}

// Run refreshes the weight table every Refresh and, when PollPath is set,
// polls every ready endpoint every PollInterval, until ctx ends. It
// returns nil when stopped by ctx. Call it at most once, in a goroutine the
// balancer's owner stops by canceling ctx.
func (d *DynamicWeight) Run(ctx context.Context) error {
	refresh := d.p.clock.NewTicker(d.p.refresh)
	defer refresh.Stop()
	var poll <-chan time.Time
	if d.p.pollPath != "" {
		t := d.p.clock.NewTicker(d.p.pollInterval)
		defer t.Stop()
		poll = t.C()
		d.pollRound(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C():
			d.rb.rebuildAt(d.p.clock.Now())
		case <-poll:
			d.pollRound(ctx)
		}
	}
}

// pollRound polls every ready endpoint once, pollWorkers at a time, then
// rebuilds the table.
func (d *DynamicWeight) pollRound(ctx context.Context) {
	s := d.snap.Load()
	work := make(chan *dwSide)
	var wg sync.WaitGroup
	for range min(pollWorkers, len(s.sides)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for side := range work {
				d.poll(ctx, side)
			}
		}()
	}
feed:
	for _, side := range s.sides {
		select {
		case work <- side:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if ctx.Err() == nil {
		d.rb.rebuildAt(d.p.clock.Now())
	}
	if d.afterPoll != nil {
		d.afterPoll()
	}
}

// poll fetches one endpoint's load report. A failed request is left to
// health checking; only a bad report is logged.
func (d *DynamicWeight) poll(ctx context.Context, s *dwSide) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.ep.Address()+d.p.pollPath, nil)
	if err != nil {
		return
	}
	resp, err := d.client.Do(req)
	if err != nil {
		slog.Debug("balance: load poll failed", "policy", DynamicWeightName, "endpoint", s.ep.Address(), "err", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReportBytes))
	if err != nil || resp.StatusCode != http.StatusOK {
		slog.Debug("balance: load poll failed", "policy", DynamicWeightName, "endpoint", s.ep.Address(), "status", resp.StatusCode, "err", err)
		return
	}
	report := resp.Header.Get(d.p.header)
	if report == "" {
		report = strings.TrimSpace(string(body))
	}
	s.report(report)
}

// ewma2 holds two time-decayed averages over one clock: the latency of
// successful requests and the fraction of failed ones. An observation at
// now moves them towards the new sample by 1-exp(-(now-last)/tau), so they
// cover roughly the last tau whatever the request rate; a failure moves the
// error fraction towards 1 and leaves the latency alone. Lock-free: two
// concurrent observers may both decay over the same interval, which only
// shifts a little weight to the newer samples.
type ewma2 struct {
	lat   atomic.Uint64 // float64 bits, ns
	errs  atomic.Uint64 // float64 bits, 0..1
	stamp atomic.Int64  // clock at the last observation
}

// observe folds one outcome at now in; rate is 1/tau.
func (e *ewma2) observe(now int64, ok bool, latency time.Duration, rate float64) {
	w := expNeg(float64(max(now-e.stamp.Load(), 0)) * rate)
	x := 1.0
	if ok {
		x = 0
		blend(&e.lat, float64(max(latency, 0)), w)
	}
	blend(&e.errs, x, w)
	if e.stamp.Load() < now {
		e.stamp.Store(now)
	}
}

// blend moves the float64 in v towards x, keeping w of the old value. A
// value that is x already (the error fraction of an endpoint that has not
// failed) is left alone: no atomic write on the request path.
func blend(v *atomic.Uint64, x, w float64) {
	for {
		old := v.Load()
		next := math.Float64bits(math.Float64frombits(old)*w + x*(1-w))
		if next == old || v.CompareAndSwap(old, next) {
			return
		}
	}
}
