package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// DefaultAgentTimeout bounds each Register, Heartbeat and Deregister call
// an Agent makes.
const DefaultAgentTimeout = 10 * time.Second

// DefaultReregisterInterval is how often an Agent that does not heartbeat
// registers its instance again.
const DefaultReregisterInterval = 30 * time.Second

// Agent re-registration and heartbeat-error backoff: agentRetryBase
// doubling to agentRetryMax, each wait randomized to [d/2, d).
const (
	agentRetryBase = 200 * time.Millisecond
	agentRetryMax  = 10 * time.Second
)

// AgentOptions are the knobs of an Agent; the zero value is usable.
type AgentOptions struct {
	// HandleSignals makes the agent deregister when the process gets
	// SIGTERM or SIGINT, and then deliver the signal again with Go's
	// handling of it restored, so that a program that does not handle the
	// signal itself exits as it would have without the agent (killed by
	// that signal). A program with its own handler for the signal gets it
	// twice: once on arrival, once re-raised after the deregistration;
	// such a program should rather leave HandleSignals off and call Close
	// from its own shutdown path. Done is closed after the deregistration
	// either way.
	HandleSignals bool
	// Timeout bounds each call to the Registrar. Default 10s.
	Timeout time.Duration
	// ReregisterInterval is how often an agent that does not heartbeat
	// (the registrar is no Heartbeater, or the check is not a TTL check)
	// registers the instance again, so that a registry that lost it (a
	// restart without its data, an operator's delete) has it back within
	// this interval: without heartbeats nothing else would tell the agent.
	// Registering an unchanged instance again changes nothing in Consul
	// (check statuses are kept), in the embedded registry or in etcd.
	// Default 30s; negative: never.
	ReregisterInterval time.Duration
	// Logger gets one line per lost registration, failed attempt,
	// registration after a failure or a loss, and deregistration (routine
	// re-registrations are not logged). Default slog.Default().
	Logger *slog.Logger
}

// Agent keeps one instance registered for the life of a Go service:
// registers it, heartbeats when the registry expires registrations (a
// Heartbeater with a TTL check) — the first time right after each
// registration, since a TTL check starts critical — registers it again
// when the registry has forgotten it (a heartbeat says so; without
// heartbeats, every ReregisterInterval), and deregisters it on Close (or on
// SIGTERM/SIGINT with HandleSignals).
type Agent struct {
	r    Registrar
	hb   Heartbeater // nil: no heartbeats
	reg  Registration
	opts AgentOptions
	log  *slog.Logger
	// clock is what the loop waits on: clock.Real; the tests set a
	// clock.Fake before Start (startAgentOn). Per-call timeouts stay on
	// real time.
	clock clock.Clock

	mu       sync.Mutex
	started  bool
	closing  bool
	cancel   context.CancelFunc
	loop     chan struct{} // closed when the background loop has ended
	sigs     chan os.Signal
	done     chan struct{}
	closeErr error
}

// NewAgent validates the registration and returns a stopped Agent. An
// empty Instance.ID is filled in with DefaultID(Service, hostname, Port).
func NewAgent(r Registrar, reg Registration, opts AgentOptions) (*Agent, error) {
	if r == nil {
		return nil, errors.New("registry: agent: registrar: must not be nil")
	}
	if reg.Instance.ID == "" {
		reg.Instance.ID = DefaultID(reg.Instance.Service, "", reg.Instance.Port)
	}
	if err := reg.Instance.Validate(); err != nil {
		return nil, fmt.Errorf("registry: agent: instance.%w", err)
	}
	if reg.Check.TTL < 0 {
		return nil, fmt.Errorf("registry: agent: check.ttl: %v must not be negative", reg.Check.TTL)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("registry: agent: timeout: %v must not be negative", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultAgentTimeout
	}
	if opts.ReregisterInterval == 0 {
		opts.ReregisterInterval = DefaultReregisterInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{r: r, reg: reg, opts: opts, done: make(chan struct{}), clock: clock.Real,
		log: log.With("service", reg.Instance.Service, "id", reg.Instance.ID)}
	if hb, ok := r.(Heartbeater); ok && reg.Check.TTL > 0 {
		a.hb = hb
	}
	return a, nil
}

// ID is the registered instance's ID.
func (a *Agent) ID() string { return a.reg.Instance.ID }

// Done is closed when the agent has stopped and deregistered: after Close,
// or after a handled signal.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Start registers the instance and, for a Heartbeater and a TTL check,
// sends the first heartbeat at once (a TTL check starts critical: without
// it the instance would be missing from passing-only views for a third of
// the TTL). Then it starts the background loop, which heartbeats (at a
// third of the TTL) or, without heartbeats, registers again every
// ReregisterInterval, and registers again whenever needed, until Close or
// the end of ctx (the end of ctx stops the loop without deregistering).
//
// If the first registration (or its first heartbeat) fails, Start returns
// the error but the loop keeps trying, with backoff, in the background: a
// service can start while its registry is down and appear when the
// registry is back. A caller that would rather not run unregistered calls
// Close and exits.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.closing {
		return errors.New("registry: agent: Start called twice or after Close")
	}
	a.started = true
	lctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.loop = make(chan struct{})
	first := make(chan error, 1)
	go a.run(lctx, first)
	err := <-first // the loop's first attempt, bounded by Timeout
	if err != nil && ctx.Err() != nil {
		return err // the loop has stopped: nothing retries
	}
	if a.opts.HandleSignals {
		a.sigs = make(chan os.Signal, 1)
		signal.Notify(a.sigs, syscall.SIGTERM, syscall.SIGINT)
		go a.onSignal(lctx, a.sigs)
	}
	if err != nil {
		return fmt.Errorf("%w (retrying in the background)", err)
	}
	return nil
}

// Close stops the loop and deregisters the instance, returning the
// Deregister error. It is idempotent: later calls wait for the first and
// return its result.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		select {
		case <-a.done:
			return a.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.closing = true
	started, cancel, loop, sigs := a.started, a.cancel, a.loop, a.sigs
	a.mu.Unlock()

	var err error
	if started {
		cancel()
		<-loop // the loop's calls are bounded by Timeout
		if sigs != nil {
			signal.Stop(sigs)
		}
		dctx, dcancel := context.WithTimeout(ctx, a.opts.Timeout)
		err = a.r.Deregister(dctx, a.ID())
		dcancel()
		if err != nil {
			err = fmt.Errorf("registry: agent: deregister %q: %w", a.ID(), err)
			a.log.Warn("registry agent: deregistration failed", "error", err)
		} else {
			a.log.Info("registry agent: deregistered")
		}
	}
	a.closeErr = err
	close(a.done)
	return err
}

// onSignal deregisters on the first SIGTERM or SIGINT and re-raises it.
func (a *Agent) onSignal(ctx context.Context, sigs chan os.Signal) {
	select {
	case <-ctx.Done():
		// Close, or Start's ctx ended: give the signals back, or they
		// would land in a channel nobody reads and be ignored.
		signal.Stop(sigs)
		return
	case sig := <-sigs:
		a.log.Info("registry agent: signal received; deregistering", "signal", sig.String())
		a.Close(context.Background())
		reraise(sig)
	}
}

func (a *Agent) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	if err := a.r.Register(rctx, a.reg); err != nil {
		return fmt.Errorf("registry: agent: register %q: %w", a.ID(), err)
	}
	return nil
}

func (a *Agent) heartbeat(ctx context.Context, interval time.Duration) error {
	hctx, cancel := context.WithTimeout(ctx, min(a.opts.Timeout, max(interval, time.Second)))
	defer cancel()
	if err := a.hb.Heartbeat(hctx, a.ID()); err != nil {
		return fmt.Errorf("registry: agent: heartbeat %q: %w", a.ID(), err)
	}
	return nil
}

// run is the agent's loop: register, then heartbeat (the first time at
// once) or, without heartbeats, register again every ReregisterInterval;
// register again when a heartbeat says the registry lost the instance.
// The outcome of the first attempt goes to first, for Start; later
// failures are logged.
func (a *Agent) run(ctx context.Context, first chan<- error) {
	defer close(a.loop)
	report := func(err error) bool {
		if first == nil {
			return false
		}
		first <- err
		first = nil
		return true
	}
	defer func() {
		if ctx.Err() != nil {
			report(fmt.Errorf("registry: agent: %q: stopped before the registration was complete: %w", a.ID(), ctx.Err()))
		}
	}()
	interval := a.reg.Check.TTL / 3
	var (
		beat     bool          // next: heartbeat (else: register)
		wait     time.Duration // before the next step
		failures int           // consecutive failed steps
		attempts int           // registrations tried since the last success
		announce bool          // log the next successful registration
		// fresh: the registration just succeeded and this is its first
		// heartbeat.
		fresh bool
	)
	for {
		if err := clock.SleepOn(ctx, a.clock, wait); err != nil {
			return
		}
		if !beat {
			attempts++
			err := a.register(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				if !report(err) {
					a.log.Warn("registry agent: registration failed; retrying", "attempt", failures, "error", err)
				}
				wait = agentBackoff(failures)
				continue
			}
			if announce || attempts > 1 {
				a.log.Info("registry agent: registered", "attempts", attempts)
			}
			attempts, announce = 0, false
			if a.hb != nil {
				beat, fresh, wait = true, true, 0
				continue
			}
			report(nil)
			failures = 0
			if a.opts.ReregisterInterval < 0 {
				<-ctx.Done() // registered, and told never to check
				return
			}
			// Nothing tells an agent without heartbeats that the
			// registry lost the instance: register again now and then
			// (a routine success is not logged).
			wait = a.opts.ReregisterInterval
			continue
		}
		err := a.heartbeat(ctx, interval)
		if ctx.Err() != nil {
			return
		}
		wasFresh := fresh
		fresh = false
		switch {
		case err == nil:
			report(nil)
			failures, wait = 0, interval
		case errors.Is(err, ErrNotRegistered) && !wasFresh:
			a.log.Warn("registry agent: the registry lost the registration; registering again", "error", err)
			beat, failures, wait, announce = false, 0, 0, true
		case errors.Is(err, ErrNotRegistered):
			// Refused right after registering: back off before trying
			// again rather than spin.
			failures++
			if !report(err) {
				a.log.Warn("registry agent: the registry refuses the first heartbeat; registering again", "attempt", failures, "error", err)
			}
			beat, wait, announce = false, agentBackoff(failures), true
		default:
			// Retry sooner than the interval while it fails, but never
			// later: the TTL is running.
			failures++
			if !report(err) {
				a.log.Warn("registry agent: heartbeat failed; retrying", "attempt", failures, "error", err)
			}
			wait = min(agentBackoff(failures), interval)
		}
	}
}

func agentBackoff(n int) time.Duration {
	d := agentRetryMax
	if n < 16 {
		d = min(agentRetryMax, agentRetryBase<<(n-1))
	}
	return d/2 + mrand.N(d/2)
}

// DefaultID is an instance ID unique to this process:
// <service>-<host>-<port>-<random>, with the container ID's first 12
// characters after the port when the process runs in a container whose ID
// the host name does not already show. host defaults to os.Hostname().
// Characters other than letters, digits, '.', '_' and '-' become '-', so
// that the ID is a valid Consul ID and etcd key segment.
func DefaultID(service, host string, port int) string {
	if host == "" {
		host, _ = os.Hostname()
	}
	parts := []string{service, host, strconv.Itoa(port)}
	if id := containerID(); id != "" && !strings.HasPrefix(id, strings.ToLower(host)) {
		parts = append(parts, id[:12])
	}
	var b [4]byte
	rand.Read(b[:])
	parts = append(parts, hex.EncodeToString(b[:]))
	return sanitizeID(strings.Join(parts, "-"))
}

func sanitizeID(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// containerID finds this process's container ID in /proc, or "".
func containerID() string {
	if id := containerIDFromCgroup(readSmall("/proc/self/cgroup")); id != "" {
		return id
	}
	return containerIDFromMountinfo(readSmall("/proc/self/mountinfo"))
}

func readSmall(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

// cgroup v1 lines end in the container ID: "12:pids:/docker/<id>",
// "…/kubepods/besteffort/pod<uid>/<id>", systemd's
// "…/docker-<id>.scope" or "…/cri-containerd-<id>.scope". Under cgroup v2
// a container usually sees only "0::/", and mountinfo is the place to look.
var (
	cgroupID     = regexp.MustCompile(`[/-]([0-9a-f]{64})(?:\.scope)?$`)
	mountinfoIDs = regexp.MustCompile(`/(?:containers|overlay-containers|sandboxes)/([0-9a-f]{64})/`)
)

func containerIDFromCgroup(data string) string {
	for _, line := range strings.Split(data, "\n") {
		if m := cgroupID.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			return m[1]
		}
	}
	return ""
}

// containerIDFromMountinfo finds the ID in the bind mounts of
// /etc/hostname, /etc/hosts and /etc/resolv.conf, which Docker, Podman and
// containerd take from the container's own directory:
// /var/lib/docker/containers/<id>/hostname and the like.
func containerIDFromMountinfo(data string) string {
	for _, line := range strings.Split(data, "\n") {
		if !strings.Contains(line, " /etc/hostname ") && !strings.Contains(line, " /etc/hosts ") &&
			!strings.Contains(line, " /etc/resolv.conf ") {
			continue
		}
		if m := mountinfoIDs.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}
