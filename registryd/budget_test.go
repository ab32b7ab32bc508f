package registryd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// bigRegistration is a registration of about size bytes (tags of 200
// bytes) with a TTL check, for filling a registry.
func bigRegistration(id string, size int) *api.AgentServiceRegistration {
	var tags []string
	for i := 0; i*200 < size && i < maxTags; i++ {
		tags = append(tags, fmt.Sprintf("%s-%03d-%s", id, i, strings.Repeat("t", 190)))
	}
	return &api.AgentServiceRegistration{
		ID: id, Name: "big", Address: "10.0.0.1", Port: 80, Tags: tags,
		Check: &api.AgentServiceCheck{TTL: "1h", CheckID: "ttl-" + id},
	}
}

// Issue 16, bug 1: registering past max_state_bytes is refused with 507,
// a message naming the budget and the excess, and changes nothing.
func TestRegistrationPastTheStateBudgetIs507AndChangesNothing(t *testing.T) {
	const budget = 256 << 10
	var logs logBuffer
	s := startServer(t, Config{MaxStateBytes: budget, Logger: logs.logger()})
	c := goClient(t, s, "")
	agent := c.Agent()
	n := 0
	for ; ; n++ {
		if n == 1000 {
			t.Fatal("1000 registrations of 8 KiB fit in a budget of 256 KiB")
		}
		err := agent.ServiceRegister(bigRegistration(fmt.Sprintf("big-%d", n), 8<<10))
		if err != nil {
			if !strings.Contains(err.Error(), "507") {
				t.Fatalf("registration %d: %v; want a 507 once the budget is used up", n, err)
			}
			break
		}
	}
	if n < 20 {
		t.Fatalf("only %d registrations of about 8 KiB fit in a budget of 256 KiB", n)
	}
	before := stateBytes(s)
	if before > budget {
		t.Fatalf("state is %d bytes, over the budget %d", before, budget)
	}
	idx := currentIndex(s)
	services, _ := agent.Services()

	// The refusal, over raw HTTP to see the status and the whole body.
	reg := fmt.Sprintf(`{"Name":"big","ID":"over","Tags":[%s]}`, strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("x", 250)+`",`, 40), ","))
	code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", reg)
	if code != http.StatusInsufficientStorage {
		t.Fatalf("registration past the budget: %d %q, want 507", code, body)
	}
	for _, want := range []string{`"over"`, fmt.Sprintf("budget of %d bytes (256 KiB, registry.max_state_bytes)", budget), "bytes over its budget", "deregister services"} {
		if !strings.Contains(body, want) {
			t.Errorf("507 body %q does not say %q", body, want)
		}
	}
	// "... making it A bytes: B bytes over ..." with B = A - budget.
	var grow, after, over int64
	if _, err := fmt.Sscanf(body[strings.Index(body, "would add"):], "would add %d bytes to the registry's state, making it %d bytes: %d bytes over", &grow, &after, &over); err != nil {
		t.Fatalf("507 body %q: %v", body, err)
	}
	if after != before+grow || over != after-budget || over <= 0 {
		t.Errorf("507 body says +%d -> %d, %d over; state was %d, budget %d", grow, after, over, before, int64(budget))
	}

	if got := stateBytes(s); got != before {
		t.Errorf("state went from %d to %d bytes on a refused registration", before, got)
	}
	if got := currentIndex(s); got != idx {
		t.Errorf("index went from %d to %d on a refused registration", idx, got)
	}
	after2, _ := agent.Services()
	if len(after2) != len(services) || after2["over"] != nil {
		t.Errorf("a refused registration changed the services: %d before, %d after", len(services), len(after2))
	}

	// Growing an existing registration is refused the same way and keeps
	// it as it was; re-sending it or shrinking it is taken.
	grown := bigRegistration("big-0", 64<<10)
	if err := agent.ServiceRegister(grown); err == nil || !strings.Contains(err.Error(), "507") {
		t.Fatalf("growing big-0 past the budget: %v, want 507", err)
	}
	if svc, _, err := agent.Service("big-0", nil); err != nil || len(svc.Tags) != len(bigRegistration("big-0", 8<<10).Tags) {
		t.Fatalf("big-0 after a refused re-registration: %v, %v; want its old tags", svc, err)
	}
	if err := agent.ServiceRegister(bigRegistration("big-0", 8<<10)); err != nil {
		t.Fatalf("re-sending big-0 unchanged: %v", err)
	}
	if err := agent.ServiceRegister(bigRegistration("big-0", 1<<10)); err != nil {
		t.Fatalf("shrinking big-0: %v", err)
	}
	if n := strings.Count(logs.String(), "registrations refused"); n != 1 {
		t.Errorf("three refusals logged %d warnings, want one until room is made:\n%s", n, logs.String())
	}
	// Deregistering frees room: the registration refused before fits now.
	for i := 1; i < 6; i++ {
		if err := agent.ServiceDeregister(fmt.Sprintf("big-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if code, body, _ := do(t, http.MethodPut, baseURL(s)+"/v1/agent/service/register", reg); code != http.StatusOK {
		t.Fatalf("after deregistrations: %d %q, want 200", code, body)
	}
	if got, want := stateBytes(s), sumCosts(s); got != want {
		t.Fatalf("state is counted as %d bytes, its instances cost %d", got, want)
	}
}

func sumCosts(s *Server) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, ss := range s.services {
		n += ss.cost
	}
	return n
}

// Issue 16, bug 1: whatever a registry accepted loads again. A registry
// filled up to its budget, with check outputs that take the most room
// in JSON, is snapshotted, closed and started again from the same
// data_dir, and has every registration; also with a smaller budget,
// which refuses new growth.
func TestRegistryFilledToItsBudgetLoadsAgain(t *testing.T) {
	const budget = 256 << 10
	dir := t.TempDir()
	s1 := startServer(t, Config{DataDir: dir, MaxStateBytes: budget})
	agent := goClient(t, s1, "").Agent()
	// Outputs over maxOutput bytes of what JSON escapes the longest: a
	// control character (\u0001), an HTML character (\u003c), a quote.
	note := strings.Repeat("\x01<\"", maxOutput)
	var ids []string
	for n := 0; ; n++ {
		if n == 1000 {
			t.Fatal("1000 registrations of up to 2 KiB fit in a budget of 256 KiB")
		}
		id := fmt.Sprintf("fill-%d", n)
		size := 2 << 10
		if n%3 == 0 {
			size = 200 // small ones fill the last gaps
		}
		if err := agent.ServiceRegister(bigRegistration(id, size)); err != nil {
			if !strings.Contains(err.Error(), "507") {
				t.Fatal(err)
			}
			if size == 200 {
				break
			}
			continue
		}
		ids = append(ids, id)
		if err := agent.UpdateTTL("ttl-"+id, note, api.HealthWarning); err != nil {
			t.Fatalf("warn %s: %v", id, err)
		}
	}
	if room := budget - stateBytes(s1); room < 0 || room > 1<<10 {
		t.Fatalf("filled to %d of %d bytes; want within 1 KiB of the budget", stateBytes(s1), budget)
	}
	idx := currentIndex(s1)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, snapshotName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > readLimit(budget) {
		t.Fatalf("the snapshot of a registry within its budget is %d bytes, more than the %d New reads", st.Size(), readLimit(budget))
	}

	check := func(s *Server) {
		t.Helper()
		if got := currentIndex(s); got != idx {
			t.Errorf("index %d after the restart, %d before", got, idx)
		}
		c := goClient(t, s, "")
		svcs, err := c.Agent().Services()
		if err != nil {
			t.Fatal(err)
		}
		if len(svcs) != len(ids) {
			t.Fatalf("%d services after the restart, %d before", len(svcs), len(ids))
		}
		for _, id := range ids {
			if svcs[id] == nil {
				t.Fatalf("%s lost in the restart", id)
			}
		}
		entries, _, err := c.Health().Service("big", "", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if aggregated(e) != api.HealthWarning {
				t.Fatalf("%s is %s after the restart, want warning", e.Service.ID, aggregated(e))
			}
		}
	}
	s2 := startServer(t, Config{DataDir: dir, MaxStateBytes: budget})
	check(s2)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// A smaller budget than the snapshot: it loads, says so, and refuses
	// growth but not what frees room.
	var logs logBuffer
	s3 := startServer(t, Config{DataDir: dir, MaxStateBytes: MinMaxStateBytes, Logger: logs.logger()})
	check(s3)
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "larger than max_state_bytes") {
		t.Errorf("loading a snapshot larger than the budget logged no warning:\n%s", l)
	}
	a3 := goClient(t, s3, "").Agent()
	if err := a3.ServiceRegister(bigRegistration("one-more", 200)); err == nil || !strings.Contains(err.Error(), "507") {
		t.Fatalf("a new registration into a registry over its budget: %v, want 507", err)
	}
	if err := a3.ServiceDeregister(ids[0]); err != nil {
		t.Fatal(err)
	}
	// Its own snapshot records the larger state, so it loads again with
	// the small budget too.
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	ids = ids[1:]
	s4 := startServer(t, Config{DataDir: dir, MaxStateBytes: MinMaxStateBytes})
	svcs, err := goClient(t, s4, "").Agent().Services()
	if err != nil || len(svcs) != len(ids) {
		t.Fatalf("after a restart with the small budget: %d services (%v), want %d", len(svcs), err, len(ids))
	}
}

func TestStateBudgetConfigIsValidated(t *testing.T) {
	for _, n := range []int64{-1, MinMaxStateBytes - 1, MaxMaxStateBytes + 1} {
		err := Config{MaxStateBytes: n}.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "max_state_bytes:") {
			t.Errorf("MaxStateBytes %d: %v, want an error naming max_state_bytes", n, err)
		}
		if _, err := New(Config{MaxStateBytes: n, Logger: quietLogger}); err == nil {
			t.Errorf("New with MaxStateBytes %d succeeded", n)
		}
	}
	for _, n := range []int64{0, MinMaxStateBytes, DefaultMaxStateBytes, MaxMaxStateBytes} {
		if err := (Config{MaxStateBytes: n}).Validate(); err != nil {
			t.Errorf("MaxStateBytes %d: %v", n, err)
		}
	}
	s, err := New(Config{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.budget != DefaultMaxStateBytes {
		t.Errorf("default budget %d, want %d", s.budget, DefaultMaxStateBytes)
	}
}

// A snapshot written before max_state_bytes existed (indented, no bound
// in its header) still loads, and is charged like any other.
func TestSnapshotOfAnEarlierVersionLoads(t *testing.T) {
	dir := t.TempDir()
	legacy := `{
 "version": 1,
 "index": 9,
 "catalog_index": 8,
 "name_indexes": {
  "orders": 9
 },
 "services": [
  {
   "registration": {
    "ID": "o1",
    "Name": "orders",
    "Address": "10.0.0.1",
    "Port": 80,
    "Tags": [
     "v2"
    ],
    "Meta": null,
    "Weights": {
     "Passing": 1,
     "Warning": 1
    },
    "EnableTagOverride": false,
    "Checks": [
     {
      "CheckID": "service:o1",
      "Name": "Service 'orders' check",
      "Notes": "",
      "TTL": "1h0m0s"
     }
    ]
   },
   "create_index": 8,
   "modify_index": 9,
   "checks": [
    {
     "check_id": "service:o1",
     "status": "passing",
     "output": "ok",
     "create_index": 8,
     "modify_index": 9
    }
   ]
  }
 ]
}`
	if err := os.WriteFile(filepath.Join(dir, snapshotName), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{DataDir: dir})
	entries, _, err := goClient(t, s, "").Health().Service("orders", "", true, nil)
	if err != nil || len(entries) != 1 || entries[0].Checks[1].Output != "ok" {
		t.Fatalf("legacy snapshot: %v, %+v; want o1 passing with output ok", err, entries)
	}
	if got, want := stateBytes(s), sumCosts(s); got != want || got == 0 {
		t.Fatalf("state after loading %d bytes, instances cost %d", got, want)
	}
}

// Issue 16, bug 1: a snapshot is encoded (and written) outside the state
// lock, so a large registry's snapshot does not hold up reads and writes:
// with the snapshot writer stopped in the middle of encoding, a GET of
// /v1/health/service and a registration both complete.
func TestSnapshotEncodingDoesNotBlockReadsOrWrites(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, Config{DataDir: dir})
	encoding, release := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before startServer's Close, which writes a snapshot too
	// Set before the first change, which the persister sees after it.
	s.snapshotEncodeHook = func() {
		once.Do(func() {
			close(encoding)
			<-release
		})
	}
	c := goClient(t, s, "")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-encoding:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot write began within 10s of a registration")
	}

	// The snapshot writer is now parked inside the encoder.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries, _, err := c.Health().Service("web", "", false, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || len(entries) != 1 || entries[0].Service.ID != "web-1" {
		t.Fatalf("GET /v1/health/service/web while a snapshot was being encoded: %v, %d entries; it must not wait for the snapshot", err, len(entries))
	}
	if err := c.Agent().ServiceRegisterOpts(&api.AgentServiceRegistration{ID: "web-2", Name: "web", Port: 81},
		api.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		t.Fatalf("registering while a snapshot was being encoded: %v; it must not wait for the snapshot", err)
	}
	free()

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snapshotName))
	if err != nil || !strings.Contains(string(b), `"web-1"`) || !strings.Contains(string(b), `"web-2"`) {
		t.Fatalf("the snapshot after Close: %v; want web-1 and web-2 in:\n%s", err, b)
	}
}
