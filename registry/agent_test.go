package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// fakeRegistrar records calls and answers them from scripted errors, and
// keeps registrations as Consul does: an instance registered with a TTL
// check is critical until its first heartbeat, one without a TTL check is
// passing at once, and forget drops everything (a registry restarted
// without its data). It is the in-memory registrar for the Agent's unit
// tests; the Agent against a real etcd is tested in registry/etcd.
//
// It stamps each call with the time of its clock: for the tests of the
// agent's timing, the clock.Fake the agent waits on, so that the gap
// between two calls is exactly the agent's wait between them.
type fakeRegistrar struct {
	clock clock.Clock
	mu    sync.Mutex
	calls []call
	// registerErrs and heartbeatErrs are consumed one per call; when
	// empty (or nil), the call does its work.
	registerErrs  []error
	heartbeatErrs []error
	// passing: registered IDs and whether they are passing.
	passing map[string]bool
	changed chan struct{}
}

type call struct {
	op, id string
	at     time.Time
}

func newFake() *fakeRegistrar { return newFakeOn(clock.Real) }

// newFakeOn returns a fakeRegistrar that stamps its calls with clk's time.
func newFakeOn(clk clock.Clock) *fakeRegistrar {
	return &fakeRegistrar{clock: clk, changed: make(chan struct{}), passing: map[string]bool{}}
}

func (f *fakeRegistrar) record(op, id string) {
	f.calls = append(f.calls, call{op, id, f.clock.Now()})
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeRegistrar) Register(_ context.Context, r Registration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("register", r.Instance.ID)
	if len(f.registerErrs) > 0 {
		err := f.registerErrs[0]
		f.registerErrs = f.registerErrs[1:]
		if err != nil {
			return err
		}
	}
	if was, ok := f.passing[r.Instance.ID]; ok && was {
		return nil // Consul keeps the check's status on re-registration
	}
	f.passing[r.Instance.ID] = r.Check.TTL == 0
	return nil
}

func (f *fakeRegistrar) Deregister(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("deregister", id)
	delete(f.passing, id)
	return nil
}

func (f *fakeRegistrar) Heartbeat(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("heartbeat", id)
	if len(f.heartbeatErrs) > 0 {
		err := f.heartbeatErrs[0]
		f.heartbeatErrs = f.heartbeatErrs[1:]
		if err != nil {
			return err
		}
	}
	if _, ok := f.passing[id]; !ok {
		return fmt.Errorf("check %q: %w", "service:"+id, ErrNotRegistered)
	}
	f.passing[id] = true
	return nil
}

// forget drops every registration, as a registry restarted without its
// data does.
func (f *fakeRegistrar) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.passing)
}

func (f *fakeRegistrar) isPassing(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passing[id]
}

// ops is the sequence of operations so far, e.g. "register heartbeat".
func (f *fakeRegistrar) ops() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := make([]string, len(f.calls))
	for i, c := range f.calls {
		s[i] = c.op
	}
	return strings.Join(s, " ")
}

func (f *fakeRegistrar) snapshot() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// waitOps waits until the operations so far start with prefix.
func (f *fakeRegistrar) waitOps(t *testing.T, prefix string, limit time.Duration) {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if strings.HasPrefix(f.ops(), prefix) {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("calls after %v: %q; want them to start with %q", limit, f.ops(), prefix)
		}
	}
}

// advanceTo drives the agent's clock until the agent waits having made
// exactly the calls want (e.g. "register heartbeat"): each time the agent
// arms its wait with fewer calls made, advanceTo advances clk to the end of
// that wait, and nothing else moves clk, so each call comes exactly the
// agent's wait after the one before. It fails the test if the calls made
// when the agent waits do not lead to want, after as many advances as want
// has calls (each advance ends a wait, and a call follows), or if the agent
// does not wait within 5s.
func (f *fakeRegistrar) advanceTo(t *testing.T, clk *clock.Fake, want string) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for advances := 0; ; advances++ {
		select {
		case <-clk.Waiting(1):
		case <-deadline.C:
			t.Fatalf("the agent did not wait within 5s; calls %q, want it to wait after %q", f.ops(), want)
		}
		// The agent records a call before it arms the wait after it:
		// every call before this wait is in.
		got := f.ops()
		if got == want {
			return
		}
		if !strings.HasPrefix(want, got+" ") {
			t.Fatalf("calls %q when the agent waited; want them to lead to %q", got, want)
		}
		if advances == len(strings.Fields(want)) {
			t.Fatalf("calls %q after %d advances of the clock; want %q", got, advances, want)
		}
		p := clk.Pending()
		if len(p) != 1 {
			t.Fatalf("timers armed %v after calls %q; want the agent's one wait", p, got)
		}
		clk.Advance(p[0])
	}
}

// registrarOnly hides the Heartbeat method.
type registrarOnly struct{ Registrar }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testReg(ttl time.Duration) Registration {
	return Registration{
		Instance: Instance{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 8080},
		Check:    Check{TTL: ttl},
	}
}

func startAgent(t *testing.T, r Registrar, reg Registration) (*Agent, error) {
	t.Helper()
	return startAgentWith(t, r, reg, AgentOptions{})
}

func startAgentWith(t *testing.T, r Registrar, reg Registration, opts AgentOptions) (*Agent, error) {
	t.Helper()
	return startAgentOn(t, clock.Real, r, reg, opts)
}

// agentT0 is where the fake clocks of the agent's tests start.
var agentT0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// startAgentOn starts an agent whose loop waits on clk. Start returns
// after the first attempt, which never waits; should it wait (on a fake
// clock nobody advances yet), Start's context ends after 5s, so that the
// test fails instead of hanging.
func startAgentOn(t *testing.T, clk clock.Clock, r Registrar, reg Registration, opts AgentOptions) (*Agent, error) {
	t.Helper()
	opts.Logger = quiet
	a, err := NewAgent(r, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	a.clock = clk
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // after Close: cleanups run last first
	t.Cleanup(func() { a.Close(context.Background()) })
	limit := time.AfterFunc(5*time.Second, cancel)
	err = a.Start(ctx)
	if !limit.Stop() {
		t.Fatalf("Start did not return within 5s (= %v); its first attempt must not wait, and the clock stands still", err)
	}
	return a, err
}

// gaps checks that each call from..to came within [least, most) of the
// one before it.
func gaps(t *testing.T, calls []call, from, to int, least, most time.Duration) {
	t.Helper()
	for i := from; i <= to; i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < least || gap >= most {
			t.Errorf("call %d (%s) came %v after the one before; want within [%v, %v)", i, calls[i].op, gap, least, most)
		}
	}
}

// gapIs checks that call i came exactly want after the one before it.
func gapIs(t *testing.T, calls []call, i int, want time.Duration) {
	t.Helper()
	if gap := calls[i].at.Sub(calls[i-1].at); gap != want {
		t.Errorf("call %d (%s) came %v after the one before; want exactly %v", i, calls[i].op, gap, want)
	}
}

// Regression: a TTL check starts critical and the first heartbeat came a
// third of the TTL after Start (10s with a 30s TTL), so a new instance was
// missing from passing-only views for that long.
func TestAgentInstanceIsPassingWhenStartReturns(t *testing.T) {
	f := newFake()
	if _, err := startAgent(t, f, testReg(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ops := f.ops(); ops != "register heartbeat" || !f.isPassing("orders-1") {
		t.Fatalf("when Start returned: calls %q, passing %v; want register, heartbeat, and a passing instance", ops, f.isPassing("orders-1"))
	}
}

func TestAgentHeartbeatsRightAfterRegisteringThenAtAThirdOfTheTTL(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	const ttl = 600 * time.Millisecond
	if _, err := startAgentOn(t, clk, f, testReg(ttl), AgentOptions{}); err != nil {
		t.Fatal(err)
	}
	f.advanceTo(t, clk, "register heartbeat heartbeat heartbeat")
	calls := f.snapshot()
	gapIs(t, calls, 1, 0)
	gapIs(t, calls, 2, ttl/3)
	gapIs(t, calls, 3, ttl/3)
}

// When a heartbeat says the registry lost the instance (a registry
// restarted without its data), the agent registers again and heartbeats
// at once, without waiting for the next interval.
func TestAgentRegistersAgainAndHeartbeatsAtOnceWhenTheRegistryForgetsIt(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	const ttl = 900 * time.Millisecond
	if _, err := startAgentOn(t, clk, f, testReg(ttl), AgentOptions{}); err != nil {
		t.Fatal(err)
	}
	f.forget()
	f.advanceTo(t, clk, "register heartbeat heartbeat register heartbeat")
	if !f.isPassing("orders-1") {
		t.Fatal("orders-1 is not passing after the agent registered it again and heartbeat")
	}
	calls := f.snapshot()
	gapIs(t, calls, 2, ttl/3) // the heartbeat that finds it gone
	gapIs(t, calls, 3, 0)
	gapIs(t, calls, 4, 0)
}

func TestAgentRetriesAFailedFirstRegistrationInTheBackground(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	down := errors.New("connection refused")
	f.registerErrs = []error{down, down}
	_, err := startAgentOn(t, clk, f, testReg(300*time.Millisecond), AgentOptions{})
	if !errors.Is(err, down) || !strings.Contains(err.Error(), "retrying in the background") {
		t.Fatalf("Start with the registry down = %v; want the registration error, retried in the background", err)
	}
	f.advanceTo(t, clk, "register register register heartbeat")
	calls := f.snapshot()
	// Backoff: the first retry after [100ms, 200ms), the second after
	// [200ms, 400ms); the heartbeat right after the registration.
	gaps(t, calls, 1, 1, agentRetryBase/2, agentRetryBase)
	gaps(t, calls, 2, 2, agentRetryBase, 2*agentRetryBase)
	gapIs(t, calls, 3, 0)
}

func TestAgentStartReportsAFailedFirstHeartbeatAndRetries(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	flaky := errors.New("timeout")
	f.heartbeatErrs = []error{flaky}
	_, err := startAgentOn(t, clk, f, testReg(3*time.Second), AgentOptions{})
	if !errors.Is(err, flaky) || !strings.Contains(err.Error(), "heartbeat") || !strings.Contains(err.Error(), "retrying in the background") {
		t.Fatalf("Start whose first heartbeat fails = %v; want the heartbeat error, retried in the background", err)
	}
	f.advanceTo(t, clk, "register heartbeat heartbeat")
	if !f.isPassing("orders-1") {
		t.Fatal("orders-1 is not passing after the retried heartbeat")
	}
	calls := f.snapshot()
	gapIs(t, calls, 1, 0)
	gaps(t, calls, 2, 2, agentRetryBase/2, agentRetryBase)
}

// A registry that refuses the first heartbeat after every registration is
// retried with backoff, not in a tight loop.
func TestAgentBacksOffWhenTheFirstHeartbeatIsRefused(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	gone := fmt.Errorf("check not found: %w", ErrNotRegistered)
	f.heartbeatErrs = []error{gone, gone}
	_, err := startAgentOn(t, clk, f, testReg(3*time.Second), AgentOptions{})
	if !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("Start whose first heartbeat is refused = %v; want ErrNotRegistered", err)
	}
	f.advanceTo(t, clk, "register heartbeat register heartbeat register heartbeat")
	calls := f.snapshot()
	gapIs(t, calls, 1, 0)
	gaps(t, calls, 2, 2, agentRetryBase/2, agentRetryBase)
	gapIs(t, calls, 3, 0)
	gaps(t, calls, 4, 4, agentRetryBase, 2*agentRetryBase)
	gapIs(t, calls, 5, 0)
}

func TestAgentRetriesHeartbeatErrorsWithoutReRegistering(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	flaky := errors.New("timeout")
	f.heartbeatErrs = []error{nil, flaky, flaky, flaky}
	if _, err := startAgentOn(t, clk, f, testReg(3*time.Second), AgentOptions{}); err != nil {
		t.Fatal(err)
	}
	// The interval is 1s; a failed heartbeat is retried sooner, after
	// the backoff (100-200ms, 200-400ms, 400-800ms), and the registration
	// is left alone.
	f.advanceTo(t, clk, "register heartbeat heartbeat heartbeat heartbeat heartbeat")
	calls := f.snapshot()
	gapIs(t, calls, 2, time.Second)
	gaps(t, calls, 3, 3, agentRetryBase/2, agentRetryBase)
	gaps(t, calls, 4, 4, agentRetryBase, 2*agentRetryBase)
	gaps(t, calls, 5, 5, 2*agentRetryBase, 4*agentRetryBase)
}

// Without heartbeats nothing tells the agent that the registry lost the
// instance: it registers again every ReregisterInterval.
func TestAgentWithoutHeartbeatsRegistersAgainEveryInterval(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	const every = 100 * time.Millisecond
	if _, err := startAgentOn(t, clk, registrarOnly{f}, testReg(0), AgentOptions{ReregisterInterval: every}); err != nil {
		t.Fatal(err)
	}
	f.advanceTo(t, clk, "register register register")
	calls := f.snapshot()
	gapIs(t, calls, 1, every)
	gapIs(t, calls, 2, every)
	f.forget()
	f.advanceTo(t, clk, "register register register register")
	if !f.isPassing("orders-1") {
		t.Fatal("orders-1 is not passing after the registration that followed the registry's loss of it")
	}
	gapIs(t, f.snapshot(), 3, every)
}

// The same for a Heartbeater when the check is not a TTL check (an HTTP
// check in Consul): the agent must not heartbeat it.
func TestAgentWithAnHTTPCheckRegistersAgainInsteadOfHeartbeating(t *testing.T) {
	clk := clock.NewFake(agentT0)
	f := newFakeOn(clk)
	reg := testReg(0)
	reg.Check.HTTP = "http://10.0.0.1:8080/health"
	const every = 50 * time.Millisecond
	if _, err := startAgentOn(t, clk, f, reg, AgentOptions{ReregisterInterval: every}); err != nil {
		t.Fatal(err)
	}
	f.advanceTo(t, clk, "register register register")
	calls := f.snapshot()
	gapIs(t, calls, 1, every)
	gapIs(t, calls, 2, every)
}

func TestNewAgentDefaultsTheReregisterInterval(t *testing.T) {
	a, err := NewAgent(newFake(), testReg(0), AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.opts.ReregisterInterval != DefaultReregisterInterval || DefaultReregisterInterval != 30*time.Second {
		t.Fatalf("ReregisterInterval = %v (default %v); want 30s", a.opts.ReregisterInterval, DefaultReregisterInterval)
	}
}

func TestAgentCloseStopsAndDeregistersOnce(t *testing.T) {
	f := newFake()
	a, err := startAgent(t, f, testReg(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.waitOps(t, "register heartbeat", 5*time.Second)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	ops := f.ops()
	if !strings.HasSuffix(ops, "deregister") || strings.Count(ops, "deregister") != 1 {
		t.Fatalf("calls = %q; want exactly one deregister, last", ops)
	}
	if err := a.Start(context.Background()); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestAgentWithoutHeartbeaterNeverHeartbeats(t *testing.T) {
	f := newFake()
	a, err := startAgent(t, registrarOnly{f}, testReg(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a.Close(context.Background())
	if ops := f.ops(); ops != "register deregister" {
		t.Fatalf("calls = %q; want register then deregister, no heartbeats", ops)
	}
}

func TestNewAgentValidates(t *testing.T) {
	if _, err := NewAgent(nil, testReg(time.Second), AgentOptions{}); err == nil || !strings.Contains(err.Error(), "registrar: must not be nil") {
		t.Fatalf("nil registrar: %v", err)
	}
	bad := testReg(time.Second)
	bad.Instance.Port = 0
	if _, err := NewAgent(newFake(), bad, AgentOptions{}); err == nil || !strings.Contains(err.Error(), "instance.port: 0 is out of range") {
		t.Fatalf("port 0: %v", err)
	}
	neg := testReg(-time.Second)
	if _, err := NewAgent(newFake(), neg, AgentOptions{}); err == nil || !strings.Contains(err.Error(), "check.ttl") {
		t.Fatalf("negative TTL: %v", err)
	}
	noID := testReg(time.Second)
	noID.Instance.ID = ""
	a, err := NewAgent(newFake(), noID, AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.ID(), "orders-") || !strings.Contains(a.ID(), "-8080-") {
		t.Fatalf("default ID = %q; want orders-<host>-8080-...", a.ID())
	}
}

func TestDefaultIDIsUniqueAndSafe(t *testing.T) {
	a, b := DefaultID("orders", "web 1/a", 8080), DefaultID("orders", "web 1/a", 8080)
	if a == b {
		t.Fatalf("two DefaultIDs are equal: %q", a)
	}
	re := regexp.MustCompile(`^orders-web-1-a-8080-(?:[0-9a-f]{12}-)?[0-9a-f]{8}$`)
	if !re.MatchString(a) {
		t.Fatalf("DefaultID = %q; want orders-web-1-a-8080-[container-]<8 hex>", a)
	}
}

func TestContainerIDIsFoundInCgroupAndMountinfo(t *testing.T) {
	const id = "3f1c2a0b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
	for _, c := range []struct{ name, data, want string }{
		{"docker v1", "12:pids:/docker/" + id + "\n11:memory:/docker/" + id + "\n", id},
		{"kubernetes", "3:cpu:/kubepods/besteffort/pod1b2c-33/" + id + "\n", id},
		{"systemd scope", "0::/system.slice/docker-" + id + ".scope\n", id},
		{"containerd scope", "1:name=systemd:/kubepods.slice/cri-containerd-" + id + ".scope\n", id},
		{"cgroup v2 namespace", "0::/\n", ""},
		{"host", "0::/user.slice/user-1000.slice/session-2.scope\n", ""},
	} {
		if got := containerIDFromCgroup(c.data); got != c.want {
			t.Errorf("%s: containerIDFromCgroup = %q; want %q", c.name, got, c.want)
		}
	}
	for _, c := range []struct{ name, data, want string }{
		{"docker", "642 630 259:1 /var/lib/docker/containers/" + id + "/hostname /etc/hostname rw,relatime - ext4 /dev/root rw\n", id},
		{"podman", "701 690 0:52 /containers/overlay-containers/" + id + "/userdata/hosts /etc/hosts rw - tmpfs tmpfs rw\n", id},
		{"containerd", "1200 1190 259:1 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + id + "/hostname /etc/hostname rw - ext4 /dev/root rw\n", id},
		{"other mount", "642 630 259:1 /var/lib/docker/containers/" + id + "/data /data rw - ext4 /dev/root rw\n", ""},
		{"host", "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n", ""},
	} {
		if got := containerIDFromMountinfo(c.data); got != c.want {
			t.Errorf("%s: containerIDFromMountinfo = %q; want %q", c.name, got, c.want)
		}
	}
}

func TestAgentBackoffStaysWithinBounds(t *testing.T) {
	for n := 1; n < 40; n++ {
		d := min(agentRetryMax, agentRetryBase<<min(n-1, 15))
		for range 20 {
			if got := agentBackoff(n); got < d/2 || got >= d {
				t.Fatalf("agentBackoff(%d) = %v; want in [%v, %v)", n, got, d/2, d)
			}
		}
	}
}

// TestAgentDeregistersOnSIGTERMThenExitsBySignal runs a child process (this
// test binary) with an Agent handling signals, sends it SIGTERM, and checks
// that it deregistered and then died of SIGTERM, as without the agent.
func TestAgentDeregistersOnSIGTERMThenExitsBySignal(t *testing.T) {
	if os.Getenv("SWITCHBOARD_AGENT_CHILD") == "1" {
		runSignalChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentDeregistersOnSIGTERMThenExitsBySignal$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SWITCHBOARD_AGENT_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				return ""
			}
			seen = append(seen, l)
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("child said nothing for 10s; so far: %q", seen)
			return ""
		}
	}
	for next() != "ready" {
		if len(seen) > 10 || seen[len(seen)-1] == "" {
			t.Fatalf("child never got ready: %q", seen)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := next(); l != ""; l = next() {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child exited with %v; want death by SIGTERM", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child exit status %v; want killed by SIGTERM (re-raised after deregistering)", ws)
	}
	if got := strings.Join(seen, " | "); !strings.Contains(got, "register orders-1 | ready | deregister orders-1") {
		t.Fatalf("child printed %q; want register, ready, then deregister before dying", got)
	}
}

// printRegistrar prints each call, for the signal child.
type printRegistrar struct{}

func (printRegistrar) Register(_ context.Context, r Registration) error {
	fmt.Println("register", r.Instance.ID)
	return nil
}
func (printRegistrar) Deregister(_ context.Context, id string) error {
	fmt.Println("deregister", id)
	return nil
}

func runSignalChild() {
	a, err := NewAgent(printRegistrar{}, testReg(time.Second), AgentOptions{HandleSignals: true, Logger: quiet})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if err := a.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {
	case <-a.Done():
		// The agent re-raises the signal right after Done; if this
		// process is still alive a second later, it did not.
		time.Sleep(time.Second)
		fmt.Println("still alive after the re-raise")
		os.Exit(3)
	case <-time.After(20 * time.Second):
		fmt.Println("no signal within 20s")
		os.Exit(4)
	}
}
