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

	"github.com/switchboard-dev/switchboard/internal/ctxtime"
)

// DefaultAgentTimeout bounds each Register, Heartbeat and Deregister call
// an Agent makes.
const DefaultAgentTimeout = 10 * time.Second

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
	// Logger gets one line per registration, lost registration, and
	// failed attempt. Default slog.Default().
	Logger *slog.Logger
}

// Agent keeps one instance registered for the life of a Go service:
// registers it, heartbeats when the registry expires registrations (a
// Heartbeater with a TTL check), registers it again when the registry has
// forgotten it, and deregisters it on Close (or on SIGTERM/SIGINT with
// HandleSignals).
type Agent struct {
	r    Registrar
	hb   Heartbeater // nil: no heartbeats
	reg  Registration
	opts AgentOptions
	log  *slog.Logger

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
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{r: r, reg: reg, opts: opts, done: make(chan struct{}),
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

// Start registers the instance and starts the background loop, which
// heartbeats (at a third of the TTL, for a Heartbeater and a TTL check)
// and registers again whenever needed, until Close or the end of ctx (the
// end of ctx stops the loop without deregistering).
//
// If the first registration fails, Start returns its error but the loop
// keeps trying, with backoff, in the background: a service can start while
// its registry is down and appear when the registry is back. A caller that
// would rather not run unregistered calls Close and exits.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.closing {
		return errors.New("registry: agent: Start called twice or after Close")
	}
	a.started = true
	err := a.register(ctx)
	lctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.loop = make(chan struct{})
	go a.run(lctx, err == nil)
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
		// Close stopped our notification; with no other handler, Go's
		// default for the signal (exit) is back in place.
		if s, ok := sig.(syscall.Signal); ok {
			syscall.Kill(os.Getpid(), s)
		}
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

func (a *Agent) run(ctx context.Context, registered bool) {
	defer close(a.loop)
	interval := a.reg.Check.TTL / 3
	failures, wait := 0, interval
	if !registered { // Start's attempt failed: that was the first
		failures = 1
		wait = agentBackoff(1)
	}
	for {
		if !registered || a.hb != nil {
			if err := ctxtime.Sleep(ctx, wait); err != nil {
				return
			}
		} else {
			<-ctx.Done() // registered, and nothing to renew
			return
		}
		if !registered {
			err := a.register(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				a.log.Warn("registry agent: registration failed; retrying", "attempt", failures, "error", err)
				wait = agentBackoff(failures)
				continue
			}
			a.log.Info("registry agent: registered", "attempts", failures+1)
			registered, failures, wait = true, 0, interval
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, min(a.opts.Timeout, max(interval, time.Second)))
		err := a.hb.Heartbeat(hctx, a.ID())
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			failures, wait = 0, interval
		case errors.Is(err, ErrNotRegistered):
			a.log.Warn("registry agent: the registry lost the registration; registering again", "error", err)
			registered, failures, wait = false, 0, 0
		default:
			// Retry sooner than the interval while it fails, but never
			// later: the TTL is running.
			failures++
			wait = min(agentBackoff(failures), interval)
			a.log.Warn("registry agent: heartbeat failed; retrying", "attempt", failures, "error", err)
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
