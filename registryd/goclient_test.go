package registryd

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// These tests drive the registry with the official Consul Go client
// (github.com/hashicorp/consul/api), which nobody here wrote.

func TestGoClientTTLCheckPassesAndLapses(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "orders-1", Name: "orders", Address: "127.0.0.1", Port: 9001, Tags: []string{"v1"},
		Check: &api.AgentServiceCheck{TTL: "300ms"},
	})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	entries, meta, err := c.Health().Service("orders", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || aggregated(entries[0]) != api.HealthCritical {
		t.Fatalf("a new TTL check must start critical (Consul's default); got %d entries, status %q", len(entries), statusOf(entries, "orders-1"))
	}
	var ttl *api.HealthCheck
	for _, hc := range entries[0].Checks {
		if hc.CheckID == "service:orders-1" {
			ttl = hc
		}
	}
	if ttl == nil || ttl.Type != "ttl" || ttl.ServiceID != "orders-1" || ttl.ServiceName != "orders" {
		t.Fatalf("the TTL check must be listed as service:orders-1 of type ttl; got %+v", entries[0].Checks)
	}

	if err := c.Agent().PassTTL("service:orders-1", "all good"); err != nil {
		t.Fatalf("PassTTL: %v", err)
	}
	passing, pmeta, err := c.Health().Service("orders", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(passing) != 1 || passing[0].Checks[1].Output != "all good" {
		t.Fatalf("after PassTTL the instance must be passing with the note as output; got %+v", passing)
	}
	if pmeta.LastIndex <= meta.LastIndex {
		t.Fatalf("the status change must raise the index: %d then %d", meta.LastIndex, pmeta.LastIndex)
	}

	// No more heartbeats: the TTL lapses for real and the check turns
	// critical; we wait on index changes, not on a timer.
	start := time.Now()
	awaitHealth(t, c, "orders", 5*time.Second, "TTL lapse turns the instance critical", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "orders-1") == api.HealthCritical
	})
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("the check turned critical after %v, before its 300ms TTL", el)
	}
	passing, _, err = c.Health().Service("orders", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(passing) != 0 {
		t.Fatalf("a lapsed instance must drop out of ?passing; got %d entries", len(passing))
	}
	checks, err := c.Agent().Checks()
	if err != nil {
		t.Fatal(err)
	}
	if got := checks["service:orders-1"]; got == nil || got.Status != api.HealthCritical || got.Output == "" {
		t.Fatalf("agent/checks must show the lapsed check critical with an output; got %+v", got)
	}

	if err := c.Agent().ServiceDeregister("orders-1"); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	entries, _, err = c.Health().Service("orders", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("after deregister the service must have no instances; got %d", len(entries))
	}
	if checks, _ := c.Agent().Checks(); len(checks) != 0 {
		t.Fatalf("deregister must remove the service's checks; %d remain", len(checks))
	}
}

func TestGoClientWarnFailAndUpdateTTL(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		Name: "pay", Port: 80, Check: &api.AgentServiceCheck{TTL: "1m", Status: "passing"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		do   func() error
		want string
	}{
		{func() error { return c.Agent().WarnTTL("service:pay", "slow") }, api.HealthWarning},
		{func() error { return c.Agent().FailTTL("service:pay", "down") }, api.HealthCritical},
		{func() error { return c.Agent().UpdateTTL("service:pay", "back", api.HealthPassing) }, api.HealthPassing},
	} {
		if err := tc.do(); err != nil {
			t.Fatalf("update to %s: %v", tc.want, err)
		}
		es, _, err := c.Health().Service("pay", "", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := statusOf(es, "pay"); got != tc.want {
			t.Fatalf("status = %s, want %s", got, tc.want)
		}
	}
	if err := c.Agent().PassTTL("service:nope", ""); err == nil {
		t.Fatal("PassTTL on an unknown check must fail")
	}
}

func TestGoClientHTTPCheckFollowsBackend(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	var code atomic.Int32
	code.Store(http.StatusOK)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Header.Get("X-Probe") != "yes" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(int(code.Load()))
		w.Write([]byte("body-text"))
	}))
	t.Cleanup(backend.Close)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "web-1", Name: "web", Port: 8080,
		Check: &api.AgentServiceCheck{HTTP: backend.URL + "/healthz", Interval: "50ms", Timeout: "1s",
			Header: map[string][]string{"X-Probe": {"yes"}}},
	}); err != nil {
		t.Fatal(err)
	}
	es := awaitHealth(t, c, "web", 5*time.Second, "HTTP check passes against a 200", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "web-1") == api.HealthPassing
	})
	if out := es[0].Checks[1].Output; out != "HTTP GET "+backend.URL+"/healthz: 200 OK Output: body-text" {
		t.Errorf("check output = %q, want Consul's form with status and body", out)
	}
	code.Store(http.StatusTooManyRequests)
	awaitHealth(t, c, "web", 5*time.Second, "HTTP 429 is warning", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "web-1") == api.HealthWarning
	})
	code.Store(http.StatusInternalServerError)
	awaitHealth(t, c, "web", 5*time.Second, "HTTP 500 is critical", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "web-1") == api.HealthCritical
	})
	// Re-registering the same service with a changed check of the same kind
	// keeps its verdict instead of flapping; the runner is replaced.
	code.Store(http.StatusOK)
	awaitHealth(t, c, "web", 5*time.Second, "back to passing", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "web-1") == api.HealthPassing
	})
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "web-1", Name: "web", Port: 8080,
		Check: &api.AgentServiceCheck{HTTP: backend.URL + "/healthz", Interval: "10m", Timeout: "1s",
			Header: map[string][]string{"X-Probe": {"yes"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if es, _, _ := c.Health().Service("web", "", false, nil); statusOf(es, "web-1") != api.HealthPassing {
		t.Fatalf("re-registration flapped the instance to %s", statusOf(es, "web-1"))
	}
	testutil.WaitFor(t, 5*time.Second, "one check runner after re-registration (the old one replaced)", func() bool { return s.runners.Load() == 1 })
	if err := c.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	if n := serviceCount(s); n != 0 {
		t.Fatalf("%d services after deregister", n)
	}
	testutil.WaitFor(t, 5*time.Second, "the check runner stops with its service", func() bool { return s.runners.Load() == 0 })
}

func TestGoClientTCPCheckFollowsListener(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-accepted })
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "db-1", Name: "db", Port: 5432,
		Check: &api.AgentServiceCheck{TCP: ln.Addr().String(), Interval: "50ms", Timeout: "500ms"},
	}); err != nil {
		t.Fatal(err)
	}
	awaitHealth(t, c, "db", 5*time.Second, "TCP check passes against a listener", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "db-1") == api.HealthPassing
	})
	ln.Close()
	<-accepted
	awaitHealth(t, c, "db", 5*time.Second, "TCP check fails once the listener is gone", func(es []*api.ServiceEntry) bool {
		return statusOf(es, "db-1") == api.HealthCritical
	})
}

func TestGoClientBlockingQueryWakesWithin50ms(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "api-1", Name: "api", Port: 1, Check: &api.AgentServiceCheck{TTL: "1m"},
	}); err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.Health().Service("api", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		at    time.Time
		index uint64
		es    []*api.ServiceEntry
		err   error
	}
	done := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		es, m, err := c.Health().Service("api", "", false, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 30 * time.Second})
		r := result{at: time.Now(), es: es, err: err}
		if m != nil {
			r.index = m.LastIndex
		}
		done <- r
	}()
	<-started
	// The query must be parked on the server before we change anything.
	testutil.WaitFor(t, 5*time.Second, "the blocking query reaches the server", func() bool { return s.blocking.Load() == 1 })
	select {
	case r := <-done:
		t.Fatalf("the blocking query returned before any change: %+v", r)
	default:
	}
	changed := time.Now()
	if err := c.Agent().PassTTL("service:api-1", ""); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if lat := r.at.Sub(changed); lat > 50*time.Millisecond {
		t.Errorf("the blocking query woke %v after the change; want within 50ms", lat)
	}
	if r.index <= meta.LastIndex || statusOf(r.es, "api-1") != api.HealthPassing {
		t.Fatalf("woken query must carry the new index and state: index %d (was %d), status %s", r.index, meta.LastIndex, statusOf(r.es, "api-1"))
	}
}

func TestGoClientFiltersByPassingAndTags(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	for _, r := range []*api.AgentServiceRegistration{
		{ID: "a", Name: "svc", Port: 1, Tags: []string{"blue", "eu"}, Check: &api.AgentServiceCheck{TTL: "1m", Status: "passing"}},
		{ID: "b", Name: "svc", Port: 2, Tags: []string{"blue", "us"}, Check: &api.AgentServiceCheck{TTL: "1m"}},
		{ID: "c", Name: "svc", Port: 3, Tags: []string{"green", "eu"}},
		{ID: "d", Name: "svc", Port: 4, Tags: []string{"blue", "eu"}, Check: &api.AgentServiceCheck{TTL: "1m", Status: "warning"}},
	} {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(es []*api.ServiceEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Service.ID)
		}
		return out
	}
	for _, tc := range []struct {
		tags    []string
		passing bool
		want    []string
	}{
		{nil, false, []string{"a", "b", "c", "d"}},
		{nil, true, []string{"a", "c"}}, // b critical, d warning: ?passing wants every check passing
		{[]string{"blue"}, false, []string{"a", "b", "d"}},
		{[]string{"blue", "eu"}, false, []string{"a", "d"}},
		{[]string{"blue", "eu"}, true, []string{"a"}},
		{[]string{"red"}, false, nil},
	} {
		es, _, err := c.Health().ServiceMultipleTags("svc", tc.tags, tc.passing, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(es); !slices.Equal(got, tc.want) {
			t.Errorf("tags %v passing %v: got %v, want %v", tc.tags, tc.passing, got, tc.want)
		}
	}
	// The single-tag form sends ?tag= once.
	es, _, err := c.Health().Service("svc", "green", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(es); !slices.Equal(got, []string{"c"}) {
		t.Errorf("tag green: got %v, want [c]", got)
	}
}

func TestGoClientCatalogAndAgentReads(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	for _, r := range []*api.AgentServiceRegistration{
		{ID: "w1", Name: "web", Address: "10.0.0.1", Port: 80, Tags: []string{"a", "b"}, Meta: map[string]string{"zone": "z1"},
			Weights: &api.AgentWeights{Passing: 5, Warning: 2}},
		{ID: "w2", Name: "web", Address: "10.0.0.2", Port: 80, Tags: []string{"b", "c"}},
		{ID: "db", Name: "db", Port: 5432},
	} {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	svcs, meta, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || !slices.Equal(svcs["web"], []string{"a", "b", "c"}) || len(svcs["db"]) != 0 {
		t.Fatalf("catalog/services = %v, want web:[a b c] and db:[]", svcs)
	}
	if meta.LastIndex == 0 || !meta.KnownLeader {
		t.Fatalf("catalog/services meta: index %d, known leader %v", meta.LastIndex, meta.KnownLeader)
	}
	cs, _, err := c.Catalog().Service("web", "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ServiceID != "w2" || cs[0].ServiceAddress != "10.0.0.2" || cs[0].Node != "test-node" || cs[0].Datacenter != "dc1" {
		t.Fatalf("catalog/service web?tag=c = %+v", cs)
	}
	cs, _, err = c.Catalog().Service("web", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ServiceWeights.Passing != 5 || cs[0].ServiceWeights.Warning != 2 || cs[0].ServiceMeta["zone"] != "z1" || cs[1].ServiceWeights.Passing != 1 {
		t.Fatalf("catalog/service web = %+v", cs)
	}

	agentSvcs, err := c.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(agentSvcs) != 3 || agentSvcs["w1"].Service != "web" || agentSvcs["w1"].Port != 80 || agentSvcs["db"].ID != "db" {
		t.Fatalf("agent/services = %+v", agentSvcs)
	}
	one, _, err := c.Agent().Service("w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if one.Address != "10.0.0.1" || one.Weights.Passing != 5 || !slices.Equal(one.Tags, []string{"a", "b"}) {
		t.Fatalf("agent/service/w1 = %+v", one)
	}
	if _, _, err := c.Agent().Service("nope", nil); err == nil {
		t.Fatal("agent/service of an unknown ID must fail")
	}
	leader, err := c.Status().Leader()
	if err != nil || leader != s.Addr() {
		t.Fatalf("status/leader = %q, %v; want %q", leader, err, s.Addr())
	}

	// A blocking catalog query wakes on a registration.
	done := make(chan map[string][]string, 1)
	go func() {
		m, _, err := c.Catalog().Services(&api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "cache", Port: 6379}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-done:
		if _, ok := m["cache"]; !ok {
			t.Fatalf("woken catalog query lacks the new service: %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking catalog/services did not wake on a registration")
	}
}

func TestGoClientDeregisterUnknownIs404(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	err := c.Agent().ServiceDeregister("ghost")
	var se api.StatusError
	if err == nil || !asStatus(err, &se) || se.Code != http.StatusNotFound {
		t.Fatalf("deregister of an unknown ID: err %v, want a 404 StatusError", err)
	}
}

func asStatus(err error, se *api.StatusError) bool {
	for e := err; e != nil; {
		if s, ok := e.(api.StatusError); ok {
			*se = s
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func TestGoClientReplaceExistingChecks(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	reg := &api.AgentServiceRegistration{ID: "x", Name: "x", Port: 1, Checks: api.AgentServiceChecks{
		{TTL: "1m"}, {TTL: "1m", CheckID: "extra"},
	}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	checks, _ := c.Agent().Checks()
	if _, ok := checks["service:x:1"]; !ok || checks["extra"] == nil || len(checks) != 2 {
		t.Fatalf("two checks, the first with Consul's numbered default ID; got %v", keys(checks))
	}
	// Without replace-existing-checks the old checks stay.
	reg.Checks = api.AgentServiceChecks{{TTL: "1m", CheckID: "only"}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	if checks, _ = c.Agent().Checks(); len(checks) != 3 {
		t.Fatalf("without replace-existing-checks old checks must stay; got %v", keys(checks))
	}
	if err := c.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}); err != nil {
		t.Fatal(err)
	}
	if checks, _ = c.Agent().Checks(); len(checks) != 1 || checks["only"] == nil {
		t.Fatalf("with replace-existing-checks only the new check must remain; got %v", keys(checks))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestGoClientContextCancelEndsBlockingQuery(t *testing.T) {
	s := startServer(t, Config{})
	c := goClient(t, s, "")
	_, meta, err := c.Health().Service("nothing", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Health().Service("nothing", "", false, (&api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute}).WithContext(ctx))
		done <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "the blocking query reaches the server", func() bool { return s.blocking.Load() == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled blocking query must return an error")
	}
	testutil.WaitFor(t, 5*time.Second, "the server lets go of a query whose client went away", func() bool { return s.blocking.Load() == 0 })
}
