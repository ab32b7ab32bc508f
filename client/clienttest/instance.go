package clienttest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/registry"
)

// DefaultCheckInterval is how often the registry checks an instance that
// sets no Options.CheckInterval: the embedded registry's floor, as
// Consul's (a shorter interval is raised to it).
const DefaultCheckInterval = time.Second

// Options describe one server of a fleet and how it registers.
type Options struct {
	// Service is the service name the server registers under. Required
	// when the server is started with a Registry.
	Service string
	// ID is the instance ID. Default "<Service>-<port>", which stays the
	// same across Kill and Revive (the port does too).
	ID string
	// Tags, Meta, Zone and Weight go into the registration as given.
	Tags   []string
	Meta   map[string]string
	Zone   string
	Weight int
	// CheckInterval is how often the registry checks the server: an HTTP
	// check of HealthPath for an HTTP server, a TCP check for a gRPC
	// server. Default DefaultCheckInterval (the registry's floor).
	CheckInterval time.Duration
	// NoCheck registers the server without a health check: the registry
	// reports it passing whatever happens to it, as a registry that does
	// not know a node died would. Killed, it is a dead target that only
	// the client can notice.
	NoCheck bool
	// Handler answers the HTTP requests that the injected faults let
	// through. Default: 200 with the instance ID as the body. Ignored by
	// gRPC servers.
	Handler http.Handler
}

// fault is what the next request suffers; it is replaced whole.
type fault struct {
	latency time.Duration
	failing bool
	code    int // HTTP status or gRPC code
}

// instance is what HTTP and gRPC servers share: an address that outlives
// Kill, the registration, the injected faults and the counter.
type instance struct {
	tb   testing.TB
	reg  *Registry // nil: not registered anywhere
	opts Options
	kind string // "http" or "grpc"
	addr string
	id   string

	requests atomic.Int64
	faults   atomic.Pointer[fault]
	healthy  atomic.Bool

	// serve starts serving on ln and returns the function that stops it
	// (closing the listener and every live connection).
	serve func(ln net.Listener) (stop func())

	mu         sync.Mutex
	stop       func() // nil while killed
	registered bool
}

func newInstance(tb testing.TB, reg *Registry, opts Options, kind string) (*instance, net.Listener) {
	tb.Helper()
	if reg != nil && opts.Service == "" {
		tb.Fatalf("clienttest: start a %s server: Options.Service: must be set to register with the registry", kind)
	}
	if opts.CheckInterval < 0 {
		tb.Fatalf("clienttest: start a %s server: Options.CheckInterval: %v must not be negative", kind, opts.CheckInterval)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("clienttest: start a %s server: %v", kind, err)
	}
	in := &instance{tb: tb, reg: reg, opts: opts, kind: kind, addr: ln.Addr().String(), id: opts.ID}
	if in.id == "" {
		name := opts.Service
		if name == "" {
			name = kind
		}
		in.id = name + "-" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	in.faults.Store(&fault{})
	in.healthy.Store(true)
	return in, ln
}

// start serves on ln, registers, and arranges the cleanup.
func (in *instance) start(ln net.Listener) {
	in.tb.Helper()
	in.stop = in.serve(ln)
	in.tb.Cleanup(in.cleanup)
	if in.reg != nil {
		in.register()
	}
}

func (in *instance) cleanup() {
	in.kill()
	in.mu.Lock()
	registered := in.registered
	in.mu.Unlock()
	if registered && in.reg.Running() {
		// Best effort: a registry shared by several tests should not keep
		// listing servers that are gone. Errors go nowhere, the test is
		// over.
		ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
		in.reg.Client().Deregister(ctx, in.id)
		cancel()
	}
}

func (in *instance) registration() registry.Registration {
	host, port, _ := net.SplitHostPort(in.addr)
	p, _ := strconv.Atoi(port)
	r := registry.Registration{Instance: registry.Instance{
		ID: in.id, Service: in.opts.Service, Address: host, Port: p,
		Tags: slices.Clone(in.opts.Tags), Meta: in.opts.Meta, Zone: in.opts.Zone, Weight: in.opts.Weight,
	}}
	if in.opts.NoCheck {
		return r
	}
	interval := in.opts.CheckInterval
	if interval == 0 {
		interval = DefaultCheckInterval
	}
	r.Check = registry.Check{Interval: interval, Timeout: 2 * time.Second}
	if in.kind == "http" {
		r.Check.HTTP = "http://" + in.addr + HealthPath
	} else {
		r.Check.TCP = in.addr
	}
	return r
}

// register registers the instance and waits until the registry lists it
// passing.
func (in *instance) register() {
	in.tb.Helper()
	if in.reg == nil {
		in.tb.Fatalf("clienttest: register %q: the server was started without a Registry", in.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := in.reg.Client().Register(ctx, in.registration()); err != nil {
		in.tb.Fatalf("clienttest: register %q: %v", in.id, err)
	}
	in.mu.Lock()
	in.registered = true
	in.mu.Unlock()
	in.awaitPassing()
}

func (in *instance) awaitPassing() {
	in.tb.Helper()
	q := registry.Query{Service: in.opts.Service, PassingOnly: true}
	_, err := in.reg.awaitCond(q, fmt.Sprintf("to include %q", in.id), func(ids []string) bool {
		return slices.Contains(ids, in.id)
	})
	if err != nil {
		in.tb.Fatalf("clienttest: %v", err)
	}
}

func (in *instance) deregister() {
	in.tb.Helper()
	if in.reg == nil {
		in.tb.Fatalf("clienttest: deregister %q: the server was started without a Registry", in.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := in.reg.Client().Deregister(ctx, in.id); err != nil {
		in.tb.Fatalf("clienttest: deregister %q: %v", in.id, err)
	}
	in.mu.Lock()
	in.registered = false
	in.mu.Unlock()
}

func (in *instance) kill() {
	in.mu.Lock()
	stop := in.stop
	in.stop = nil
	in.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (in *instance) revive() {
	in.tb.Helper()
	in.mu.Lock()
	if in.stop != nil {
		in.mu.Unlock()
		return
	}
	ln, err := net.Listen("tcp", in.addr)
	if err != nil {
		in.mu.Unlock()
		in.tb.Fatalf("clienttest: revive %q on %s: %v", in.id, in.addr, err)
	}
	in.stop = in.serve(ln)
	registered := in.registered
	in.mu.Unlock()
	if registered && in.reg.Running() {
		in.awaitPassing()
	}
}

func (in *instance) alive() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stop != nil
}

func (in *instance) instance() registry.Instance { return in.registration().Instance }

func (in *instance) slow(d time.Duration) {
	f := *in.faults.Load()
	f.latency = d
	in.faults.Store(&f)
}

func (in *instance) fail(code int) {
	f := *in.faults.Load()
	f.failing, f.code = true, code
	in.faults.Store(&f)
}

func (in *instance) heal() { in.faults.Store(&fault{}) }

// delay waits for the injected latency, or until ctx ends (the client gave
// up, or Kill closed the connection); it reports whether to go on.
func (in *instance) delay(ctx context.Context, d time.Duration) bool {
	return d <= 0 || clock.Sleep(ctx, d) == nil
}

// startFleet starts n servers with start, which each get their own port
// and ID.
func startFleet[S any](tb testing.TB, n int, opts Options, kind string, start func() S) []S {
	tb.Helper()
	if n > 1 && opts.ID != "" {
		tb.Fatalf("clienttest: start %d %s servers: Options.ID %q would be shared; leave it empty", n, kind, opts.ID)
	}
	fleet := make([]S, n)
	for i := range fleet {
		fleet[i] = start()
	}
	return fleet
}
