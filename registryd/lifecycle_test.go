package registryd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
)

func TestTTLLapseThenDeregisterCriticalServiceAfter(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "job-1", Name: "job", Port: 7000,
		Check: &api.AgentServiceCheck{TTL: "300ms", Status: "passing", DeregisterCriticalServiceAfter: "400ms"},
	}); err != nil {
		t.Fatal(err)
	}
	// Heartbeats keep it passing for a while: three renewals 150ms apart,
	// each before the 300ms TTL would lapse.
	var lastBeat time.Time
	for range 3 {
		if err := c.Agent().PassTTL("service:job-1", ""); err != nil {
			t.Fatal(err)
		}
		lastBeat = time.Now()
		es, _, _ := c.Health().Service("job", "", true, nil)
		if len(es) != 1 {
			t.Fatal("a heartbeating instance dropped out of ?passing")
		}
		timer := time.NewTimer(150 * time.Millisecond) // the heartbeat cadence, not a wait for an event
		<-timer.C
	}
	// Heartbeats stop: critical after the TTL, out of ?passing ...
	awaitHealth(t, c, "job", 5*time.Second, "TTL lapse", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "job-1") == api.HealthCritical
	})
	if es, _, _ := c.Health().Service("job", "", true, nil); len(es) != 0 {
		t.Fatal("a critical instance is still in ?passing")
	}
	// ... and gone after DeregisterCriticalServiceAfter more.
	awaitHealth(t, c, "job", 5*time.Second, "deregistered after staying critical", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "job-1") == "absent"
	})
	if el := time.Since(lastBeat); el < 700*time.Millisecond {
		t.Errorf("removed %v after the last heartbeat; want at least TTL+DeregisterCriticalServiceAfter (700ms)", el)
	}
	if checks, _ := c.Agent().Checks(); len(checks) != 0 {
		t.Fatalf("the reaped service's checks remain: %v", keys(checks))
	}
}

func TestTTLAndReaperWithFakeClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	s := newServer(Config{Listen: DefaultListen, Logger: quietLogger, NodeName: "n", MaxBodyBytes: DefaultMaxBodyBytes}, clk)
	t.Cleanup(func() { s.Close() })
	def, err := decodeService([]byte(`{"Name":"m","Check":{"TTL":"10s","Status":"passing","DeregisterCriticalServiceAfter":"1m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.register(def, false); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if c := s.checks["service:m"]; c != nil {
			return c.status
		}
		return "absent"
	}
	clk.Advance(9 * time.Second)
	if err := s.updateTTL("service:m", statusPassing, ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second) // 18s after registering, 9s after the renewal
	if got := status(); got != statusPassing {
		t.Fatalf("renewed 9s ago with a 10s TTL: %s", got)
	}
	clk.Advance(time.Second)
	if got := status(); got != statusCritical {
		t.Fatalf("10s after the renewal: %s, want critical", got)
	}
	clk.Advance(59 * time.Second)
	if got := status(); got != statusCritical {
		t.Fatalf("59s critical: %s, want still registered and critical", got)
	}
	// A pass resets the reaper; failing again starts it over.
	if err := s.updateTTL("service:m", statusPassing, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.updateTTL("service:m", statusCritical, "down"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	if got := status(); got != statusCritical {
		t.Fatalf("the reaper did not restart with the new critical period: %s", got)
	}
	clk.Advance(time.Second)
	if got := status(); got != "absent" || serviceCount(s) != 0 {
		t.Fatalf("critical for 1m with DeregisterCriticalServiceAfter=1m: %s, %d services; want removed", got, serviceCount(s))
	}
}

func TestNonLoopbackWithoutTokenIsRefused(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:8500", ":8500", "[::]:8500", "192.0.2.1:8500", "example.com:8500"} {
		_, err := New(Config{Listen: listen, Logger: quietLogger})
		if err == nil || !strings.Contains(err.Error(), "listen:") || !strings.Contains(err.Error(), "acl_token") {
			t.Errorf("New with listen %q and no token: %v; want a listen: error asking for acl_token", listen, err)
		}
		if err := (Config{Listen: listen, ACLToken: "t"}).Validate(); err != nil {
			t.Errorf("listen %q with a token: %v", listen, err)
		}
		if err := (Config{Listen: listen, Insecure: true}).Validate(); err != nil {
			t.Errorf("listen %q with insecure: %v", listen, err)
		}
	}
	for _, listen := range []string{"", "127.0.0.1:8500", "localhost:0", "[::1]:8500"} {
		if err := (Config{Listen: listen}).Validate(); err != nil {
			t.Errorf("loopback %q: %v", listen, err)
		}
	}
	// Serve on a listener that is not loopback is refused the same way.
	s, err := New(Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := s.Serve(ln); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("Serve on 0.0.0.0 without token: %v", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Listen: "nope"}, "listen:"},
		{Config{Listen: "127.0.0.1:99999"}, "listen:"},
		{Config{ACLToken: "a", ACLTokenFile: "/x"}, "acl_token_file:"},
		{Config{ACLReads: true}, "acl_reads:"},
		{Config{MaxBodyBytes: -1}, "max_body_bytes:"},
		{Config{NodeName: " x"}, "node_name:"},
		{Config{ACLToken: " padded "}, "acl_token:"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error starting %q", tc.cfg, err, tc.want)
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	if _, err := New(Config{ACLTokenFile: empty, Logger: quietLogger}); err == nil || !strings.Contains(err.Error(), "acl_token_file:") {
		t.Errorf("empty token file: %v", err)
	}
	good := filepath.Join(dir, "tok")
	os.WriteFile(good, []byte("from-file\n"), 0o600)
	s := startServer(t, Config{ACLTokenFile: good})
	if code, _, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", goodReg, "X-Consul-Token", "from-file"); code != 200 {
		t.Fatalf("token from file refused: %d", code)
	}
}

func TestSnapshotSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s1, err := New(Config{DataDir: dir, Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := decodeService([]byte(`{"Name":"orders","ID":"o1","Address":"10.1.1.1","Port":9000,"Tags":["v2"],"Meta":{"zone":"eu-1"},
		"Weights":{"Passing":3,"Warning":1},"Checks":[{"TTL":"1h","Status":"passing"},{"TTL":"1h","CheckID":"deep","Notes":"n"}]}`))
	if err := s1.register(def, false); err != nil {
		t.Fatal(err)
	}
	def2, _ := decodeService([]byte(`{"Name":"gone","ID":"g1"}`))
	s1.register(def2, false)
	s1.deregister("g1", "test")
	ctx := context.Background()
	if err := s1.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "i1", Service: "inproc", Address: "127.0.0.1", Port: 1}}); err != nil {
		t.Fatal(err)
	}
	idx1 := currentIndex(s1)
	s1.mu.RLock()
	goneIdx := s1.catalogIndex
	s1.mu.RUnlock()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotName)); err != nil {
		t.Fatalf("no snapshot after Close: %v", err)
	}

	s2, err := New(Config{DataDir: dir, Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s2.Close()
	if got := currentIndex(s2); got != idx1 {
		t.Fatalf("index after restart %d, before %d: it must not go backwards", got, idx1)
	}
	ins, err := s2.Discoverer().Instances(ctx, registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	want := registry.Instance{ID: "o1", Service: "orders", Address: "10.1.1.1", Port: 9000, Tags: []string{"v2"},
		Meta: map[string]string{"zone": "eu-1"}, Weight: 3, Zone: "eu-1", Health: registry.Critical}
	if len(ins) != 1 || !instEqual(ins[0], want) {
		t.Fatalf("after restart: %+v, want %+v (one check passing, one critical as before)", ins, want)
	}
	s2.mu.RLock()
	deep := s2.checks["deep"]
	missingIdx, _ := s2.nameIndexLocked("gone")
	s2.mu.RUnlock()
	if deep == nil || deep.def.Notes != "n" || deep.status != statusCritical {
		t.Fatalf("check 'deep' after restart: %+v", deep)
	}
	if missingIdx < goneIdx {
		t.Fatalf("the removed service's index went back from %d to %d", goneIdx, missingIdx)
	}
	if ins, _ := s2.Discoverer().Instances(ctx, registry.Query{Service: "inproc"}); len(ins) != 1 {
		t.Fatalf("in-process registration lost across restart: %+v", ins)
	}
}

func instEqual(a, b registry.Instance) bool {
	return a.ID == b.ID && a.Service == b.Service && a.Address == b.Address && a.Port == b.Port &&
		slices.Equal(a.Tags, b.Tags) && len(a.Meta) == len(b.Meta) && a.Meta["zone"] == b.Meta["zone"] &&
		a.Weight == b.Weight && a.Zone == b.Zone && a.Health == b.Health
}

// Issue 16, bug 1: a snapshot that cannot be loaded — corrupt, invalid,
// of another version, too big, not a file — never keeps the registry (and
// so switchboard) from starting. It is logged as an error naming the file
// and why, moved aside under a name of its own, and the registry starts
// empty and takes registrations, which the next snapshot keeps.
func TestUnloadableSnapshotIsSetAsideAndTheRegistryStartsEmpty(t *testing.T) {
	// Over readLimit(MinMaxStateBytes), with a header that records a bound.
	pad := strings.Repeat(" ", int(readLimit(MinMaxStateBytes)))
	for _, tc := range []struct{ name, content, why string }{
		{"not JSON", `{"version":1,`, "corrupt: unexpected end of JSON input"},
		{"wrong version", `{"version":9,"index":1,"catalog_index":1}`, "version 9, this build reads version 1"},
		{"zero index", `{"version":1,"index":0,"catalog_index":0}`, "corrupt: indexes"},
		{"bad service", `{"version":1,"index":5,"catalog_index":5,"name_indexes":{"a":5},"services":[{"registration":{"Name":"a","Port":70000},"create_index":5,"modify_index":5}]}`, "Port: 70000 is out of range"},
		{"bad status", `{"version":1,"index":5,"catalog_index":5,"name_indexes":{"a":5},"services":[{"registration":{"Name":"a","Checks":[{"TTL":"1s","CheckID":"c","Name":"c"}]},"create_index":5,"modify_index":5,"checks":[{"check_id":"c","status":"great","create_index":5,"modify_index":5}]}]}`, "is not passing, warning or critical"},
		{"index from future", `{"version":1,"index":5,"catalog_index":5,"name_indexes":{"a":5},"services":[{"registration":{"Name":"a"},"create_index":5,"modify_index":9}]}`, "out of order"},
		{"too big for its recorded bound", `{"version":1,"max_state_bytes":65536,"index":1,"catalog_index":1,"name_indexes":{},"services":[]` + pad + `}`, "more than the 65687 a snapshot of a state within max_state_bytes 65536 may have"},
		{"bound over the ceiling", `{"version":1,"max_state_bytes":1099511627776,"index":1,"catalog_index":1,"name_indexes":{},"services":[]` + pad + `}`, "records a max_state_bytes of 1099511627776, more than any registry may have"},
		{"empty file", ``, "corrupt: unexpected end of JSON input"},
		{"a directory", "", "is a directory, not a snapshot file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, snapshotName)
			if tc.name == "a directory" {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs logBuffer
			s := startServer(t, Config{DataDir: dir, MaxStateBytes: MinMaxStateBytes, Logger: logs.logger()})

			aside, _ := filepath.Glob(path + ".unreadable-*")
			if len(aside) != 1 {
				t.Fatalf("set aside as %v; want one %s.unreadable-<time>", aside, snapshotName)
			}
			if tc.name == "a directory" {
				if st, err := os.Stat(aside[0]); err != nil || !st.IsDir() {
					t.Fatalf("the directory was not moved aside: %v", err)
				}
			} else if b, err := os.ReadFile(aside[0]); err != nil || string(b) != tc.content {
				t.Fatalf("%s does not hold the snapshot as it was: %v", aside[0], err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s is still there after being set aside: %v", path, err)
			}
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=ERROR") && strings.Contains(l, "snapshot") {
					line = l
				}
			}
			for _, want := range []string{path, aside[0], tc.why, "empty"} {
				if !strings.Contains(line, want) {
					t.Errorf("the error logged does not say %q:\n%s", want, logs.String())
				}
			}

			// It works, and its next snapshot is a good one.
			c := goClient(t, s, "")
			if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "after-1", Name: "after", Port: 80}); err != nil {
				t.Fatalf("register after starting empty: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := startServer(t, Config{DataDir: dir, MaxStateBytes: MinMaxStateBytes})
			if svcs, err := goClient(t, s2, "").Agent().Services(); err != nil || svcs["after-1"] == nil {
				t.Fatalf("after a restart: %v, %v; want after-1", svcs, err)
			}
		})
	}
}

// A snapshot that can be neither loaded nor moved aside is not replaced:
// the registry starts empty and keeps no snapshot until it is moved.
func TestUnloadableSnapshotThatCannotBeMovedIsNotOverwritten(t *testing.T) {
	renameFile = func(string, string) error { return errors.New("rename: read-only file system") }
	t.Cleanup(func() { renameFile = os.Rename })
	dir := t.TempDir()
	path := filepath.Join(dir, snapshotName)
	if err := os.WriteFile(path, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	s := startServer(t, Config{DataDir: dir, Logger: logs.logger()})
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "NOT persisted") || !strings.Contains(l, "read-only file system") {
		t.Errorf("the error logged does not say the registry is not persisted and why:\n%s", l)
	}
	if err := goClient(t, s, "").Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "a-1", Name: "a"}); err != nil {
		t.Fatalf("register: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "broken" {
		t.Fatalf("the snapshot that could not be moved was replaced: %q, %v", b, err)
	}
}

// A snapshot set aside never replaces one set aside before, also within
// the same second.
func TestSetAsideSnapshotsAreAllKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, snapshotName)
	for i := range 3 {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("broken %d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{DataDir: dir, Logger: quietLogger})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		s.Close()
	}
	aside, _ := filepath.Glob(path + ".unreadable-*")
	got := map[string]bool{}
	for _, f := range aside {
		b, _ := os.ReadFile(f)
		got[string(b)] = true
	}
	if len(aside) != 3 || !got["broken 0"] || !got["broken 1"] || !got["broken 2"] {
		t.Fatalf("set aside: %v holding %v; want the three broken snapshots", aside, got)
	}
}

func TestSnapshotWritesAreCoalesced(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{DataDir: dir, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 200 {
		def, _ := decodeService([]byte(`{"Name":"burst","ID":"b` + itoa(uint64(i)) + `"}`))
		if err := s.register(def, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"registration"`); n != 200 {
		t.Fatalf("snapshot holds %d registrations, want 200", n)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestInProcessRegisterDiscoverAndWatch(t *testing.T) {
	s := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := s.Discoverer()
	w, err := d.Watch(ctx, registry.Query{Service: "pay", PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first, err := w.Next(ctx)
	if err != nil || len(first) != 0 {
		t.Fatalf("first Next: %v, %v; want the empty current set", first, err)
	}
	err = s.Register(ctx, registry.Registration{
		Instance: registry.Instance{ID: "p1", Service: "pay", Address: "127.0.0.1", Port: 7001, Weight: 4, Zone: "z9", Tags: []string{"t"}},
		Check:    registry.Check{TTL: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Critical until the first heartbeat (Consul's default), so the
	// passing-only watch sees nothing yet; the heartbeat brings it in.
	if err := s.Heartbeat(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	got, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := registry.Instance{ID: "p1", Service: "pay", Address: "127.0.0.1", Port: 7001, Tags: []string{"t"},
		Meta: map[string]string{"zone": "z9"}, Weight: 4, Zone: "z9", Health: registry.Passing}
	if len(got) != 1 || !instEqual(got[0], want) {
		t.Fatalf("Next after heartbeat: %+v, want %+v", got, want)
	}
	// The same instance over HTTP, with Consul's shapes.
	es, _, err := goClient(t, s, "").Health().Service("pay", "", true, nil)
	if err != nil || len(es) != 1 || es[0].Service.Weights.Passing != 4 || es[0].Service.Meta["zone"] != "z9" {
		t.Fatalf("HTTP view of an in-process registration: %+v, %v", es, err)
	}

	svcs, idx, err := s.WatchServices(ctx, 0)
	if err != nil || !slices.Equal(svcs["pay"], []string{"t"}) || idx == 0 {
		t.Fatalf("WatchServices(0) = %v, %d, %v", svcs, idx, err)
	}
	type ws struct {
		m   map[string][]string
		idx uint64
		err error
	}
	done := make(chan ws, 1)
	go func() {
		m, i, err := s.WatchServices(ctx, idx)
		done <- ws{m, i, err}
	}()
	if err := s.Deregister(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.idx <= idx || len(r.m) != 0 {
		t.Fatalf("WatchServices after deregister = %v, %d, %v; want empty with a larger index than %d", r.m, r.idx, r.err, idx)
	}
	if got, err := w.Next(ctx); err != nil || len(got) != 0 {
		t.Fatalf("watch after deregister: %v, %v", got, err)
	}
	// After an error (here a cancelled context) the next Next answers at
	// once with the current set, changed or not.
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if _, err := w.Next(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context: %v", err)
	}
	if got, err := w.Next(ctx); err != nil || len(got) != 0 {
		t.Fatalf("first Next after an error: %v, %v; want the current (empty) set at once", got, err)
	}
	if err := s.Heartbeat(ctx, "p1"); !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("Heartbeat after deregister: %v, want ErrNotRegistered", err)
	}
	if err := s.Deregister(ctx, "p1"); err != nil {
		t.Fatalf("deregistering an unknown ID is not an error for a Registrar: %v", err)
	}
	if err := s.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "x", Service: "x", Address: "a", Port: 0}}); err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("bad instance: %v, want a port error", err)
	}
}

func TestCloseWakesWatchersAndStopsEverything(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0", Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	s.minInterval = testMinInterval
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	backend := net.ListenConfig{}
	ln, err := backend.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := goClient(t, s, "")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "w", Check: &api.AgentServiceCheck{TCP: ln.Addr().String(), Interval: "20ms"}}); err != nil {
		t.Fatal(err)
	}
	// Let the TCP check settle (passing), so that nothing changes the
	// registry while the watchers park.
	awaitHealth(t, c, "w", 5*time.Second, "the TCP check passes", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "w") == api.HealthPassing
	})
	ctx := context.Background()
	idx := currentIndex(s)
	w, _ := s.Discoverer().Watch(ctx, registry.Query{Service: "other"})
	w.Next(ctx)
	watchErr, servicesErr, httpErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { _, err := w.Next(ctx); watchErr <- err }()
	go func() { _, _, err := s.WatchServices(ctx, idx); servicesErr <- err }()
	go func() {
		_, _, err := c.Health().Service("other", "", false, &api.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
		httpErr <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "the HTTP watcher parks", func() bool { return s.blocking.Load() == 1 })
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("Close took %v with watchers parked", el)
	}
	if err := <-watchErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-process watcher woke with %v, want ErrClosed", err)
	}
	if err := <-servicesErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("WatchServices woke with %v, want ErrClosed", err)
	}
	if err := <-httpErr; err == nil {
		t.Fatal("the HTTP blocking query must fail when the server closes")
	}
	// Close waited for every check runner (wg); a second Close is a no-op.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "a", Service: "a", Address: "a", Port: 1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
}

// TestWatchServicesFollowsRegistrationsNotHealth: a service whose only
// instance is critical is still listed (its route stays and answers 503);
// only deregistration removes it.
func TestWatchServicesFollowsRegistrationsNotHealth(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	err = s.Register(ctx, registry.Registration{
		Instance: registry.Instance{ID: "c1", Service: "cold", Address: "127.0.0.1", Port: 7001, Tags: []string{"urlprefix-/cold"}},
		Check:    registry.Check{TTL: time.Minute}, // critical until its first heartbeat
	})
	if err != nil {
		t.Fatal(err)
	}
	svcs, _, err := s.WatchServices(ctx, 0)
	if err != nil || !slices.Equal(svcs["cold"], []string{"urlprefix-/cold"}) {
		t.Fatalf("WatchServices with a critical instance = %v, %v; want the service with its tag", svcs, err)
	}
}

// In process, an HTTP or TCP check without Interval runs every
// DefaultCheckInterval, as registry/consul fills it in; the HTTP API keeps
// requiring it, as Consul's does (structs.CheckType.Validate: "Interval
// must be > 0 for Script, HTTP, H2PING, TCP, UDP or OSService checks").
func TestInProcessHTTPAndTCPChecksDefaultInterval(t *testing.T) {
	s := startServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-accepted })
	go func() { // accept and drop, until the listener closes
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, r := range []registry.Registration{
		{Instance: registry.Instance{ID: "h1", Service: "h", Address: "127.0.0.1", Port: 1}, Check: registry.Check{HTTP: backend.URL + "/health"}},
		{Instance: registry.Instance{ID: "t1", Service: "t", Address: "127.0.0.1", Port: 1}, Check: registry.Check{TCP: ln.Addr().String()}},
	} {
		if err := s.Register(ctx, r); err != nil {
			t.Fatalf("Register %s without Interval: %v", r.Instance.ID, err)
		}
	}
	c := goClient(t, s, "")
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"service:h1", "service:t1"} {
		if ch := checks[id]; ch == nil || ch.Definition.IntervalDuration != DefaultCheckInterval {
			t.Fatalf("check %s = %+v; want Interval %v", id, ch, DefaultCheckInterval)
		}
	}
	// The first probe runs at registration, so both turn passing.
	for _, svc := range []string{"h", "t"} {
		awaitHealth(t, c, svc, 5*time.Second, svc+" passing", func(es []*api.ServiceEntry) bool {
			return len(es) == 1 && aggregated(es[0]) == api.HealthPassing
		})
	}
	// A negative Interval is refused naming the field, not defaulted.
	err = s.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "n1", Service: "n", Address: "127.0.0.1", Port: 1}, Check: registry.Check{HTTP: backend.URL, Interval: -time.Second}})
	if err == nil || !strings.Contains(err.Error(), "Check.Interval") {
		t.Fatalf("Register with Interval -1s: %v; want an error naming Check.Interval", err)
	}
	// Over HTTP, a missing Interval stays a 400 naming it.
	code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", `{"Name":"x","Check":{"TCP":"`+ln.Addr().String()+`"}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "Check.Interval: is required") {
		t.Fatalf("HTTP register of a TCP check without Interval = %d %q; want 400 naming Check.Interval", code, body)
	}
}

// With Handler() mounted on a server of the caller's own (whose request
// contexts do not derive from the registry's), Close still ends a parked
// blocking query, with the 503 the docs promise.
func TestCloseEndsBlockingQueryOnMountedHandler(t *testing.T) {
	s, err := New(Config{Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "w", Service: "web", Address: "10.0.0.1", Port: 80}}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/health/service/web?index=%d&wait=1m", ts.URL, currentIndex(s)), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{resp.StatusCode, string(b), err}
	}()
	testutil.WaitFor(t, 5*time.Second, "the blocking query parks", func() bool { return s.blocking.Load() == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.err != nil || a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting down") {
			t.Fatalf("blocking query after Close = %d %q, %v; want 503 registry is shutting down", a.code, a.body, a.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("blocking query still parked 3s after Close")
	}
}

// A failed snapshot write is retried on its own, with backoff, rather than
// only at the next change or at Close.
func TestFailedSnapshotWriteIsRetriedWithoutAnotherChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := New(Config{DataDir: dir, Logger: quietLogger, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.snapshotRetryMin, s.snapshotRetryMax = 20*time.Millisecond, 40*time.Millisecond
	writes := make(chan error, 64)
	s.snapshotHook = func(err error) {
		select {
		case writes <- err:
		default:
		}
	}
	next := func(what string) error {
		t.Helper()
		select {
		case err := <-writes:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no snapshot write within 5s", what)
			return nil
		}
	}
	// Without its directory the write fails (root ignores permissions, so
	// a read-only directory would not do).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Register(ctx, registry.Registration{Instance: registry.Instance{ID: "keep-1", Service: "keep", Address: "10.0.0.1", Port: 80}}); err != nil {
		t.Fatal(err)
	}
	if err := next("write after the registration"); err == nil {
		t.Fatal("snapshot write into a removed directory succeeded")
	}
	// It keeps retrying while the directory is missing...
	if err := next("first retry"); err == nil {
		t.Fatal("retry into a removed directory succeeded")
	}
	// ...and succeeds once it is back, with no further change.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Attempts already under way before the MkdirAll may still fail; the
	// backoff cap (40ms) plus persistEvery bounds them to a few dozen in
	// the 5s each next allows.
	for i := 0; ; i++ {
		err := next("retry after the directory returned")
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatalf("still failing after %d retries with the directory back: %v", i+1, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, snapshotName))
	if err != nil || !strings.Contains(string(b), "keep-1") {
		t.Fatalf("snapshot after the retry: %v, %q; want it to hold keep-1", err, b)
	}
}

func TestSnapshotRetryBackoffDoublesToItsCap(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 5 {
		d = nextRetry(d, time.Second, 5*time.Second)
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}
