package registries

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
	etcdreg "github.com/switchboard-dev/switchboard/registry/etcd"
	"github.com/switchboard-dev/switchboard/registryd"
	"github.com/switchboard-dev/switchboard/upstream"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startEmbedded(t testing.TB) *registryd.Server {
	t.Helper()
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func parse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("%v\n---\n%s", err, yaml)
	}
	return cfg
}

// sets records the instance sets a view delivers.
type sets chan []registry.Instance

func subscribe(t testing.TB, v upstream.View) sets {
	ch := make(sets, 1024)
	cancel := v.Subscribe(func(s discovery.Snapshot) { ch <- s.Instances })
	t.Cleanup(cancel)
	return ch
}

// waitFor returns the first delivered set of which ok holds.
func (s sets) waitFor(t testing.TB, what string, ok func([]registry.Instance) bool) []registry.Instance {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case in := <-s:
			if ok(in) {
				return in
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func ids(in []registry.Instance) []string {
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = x.ID
	}
	sort.Strings(out)
	return out
}

func hasIDs(want ...string) func([]registry.Instance) bool {
	return func(in []registry.Instance) bool { return fmt.Sprint(ids(in)) == fmt.Sprint(want) }
}

func consulClient(t testing.TB, addr string) *consul.Client {
	c, err := consul.NewClient(&consul.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func registerConsul(t testing.TB, c *consul.Client, id string, port int) {
	t.Helper()
	err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
		ID: id, Name: "orders", Address: "127.0.0.1", Port: port,
		Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFeedFollowsTheEmbeddedRegistry(t *testing.T) {
	srv := startEmbedded(t)
	m := New(quiet(), prometheus.NewRegistry())
	defer m.Close()
	m.SetEmbedded(srv.Discoverer())
	if err := m.Apply(parse(t, "registry: {listen: '127.0.0.1:0'}\n")); err != nil {
		t.Fatal(err)
	}
	f, err := m.Watch(config.EmbeddedRegistry, registry.Query{Service: "orders", PassingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := subscribe(t, f)
	c := consulClient(t, srv.Addr())
	registerConsul(t, c, "o1", 9001)
	got.waitFor(t, "o1", hasIDs("o1"))
	registerConsul(t, c, "o2", 9002)
	in := got.waitFor(t, "o1 and o2", hasIDs("o1", "o2"))
	if in[0].HostPort() != "127.0.0.1:9001" && in[1].HostPort() != "127.0.0.1:9001" {
		t.Fatalf("instances %+v", in)
	}
	if err := c.Agent().FailTTL("service:o1", "down"); err != nil {
		t.Fatal(err)
	}
	got.waitFor(t, "o1 to leave the passing set", hasIDs("o2"))
	if st := m.Status(); len(st) != 1 || st[0].Service != "orders" || st[0].Stale {
		t.Fatalf("status %+v", st)
	}
}

func TestEtcdRegistryFeedsAndAReloadMovesFeeds(t *testing.T) {
	etcd := testutil.StartEtcd(t)
	r, err := etcdreg.New(etcdreg.Config{Endpoints: []string{etcd.Addr()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	reg := func(prefix, id string, port int) {
		t.Helper()
		rr := r
		if prefix != "" {
			var err error
			rr, err = etcdreg.New(etcdreg.Config{Endpoints: []string{etcd.Addr()}, Prefix: prefix, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rr.Close() })
		}
		if err := rr.Register(ctx, registry.Registration{Instance: registry.Instance{ID: id, Service: "orders", Address: "127.0.0.1", Port: port}, Check: registry.Check{TTL: 30 * time.Second}}); err != nil {
			t.Fatal(err)
		}
	}
	reg("", "e1", 9001)
	reg("/other", "x1", 9101)

	m := New(quiet(), prometheus.NewRegistry())
	defer m.Close()
	yaml := "registries:\n  main: {kind: etcd, address: '%s', prefix: '%s'}\n"
	if err := m.Apply(parse(t, fmt.Sprintf(yaml, etcd.Addr(), "/switchboard"))); err != nil {
		t.Fatal(err)
	}
	f, err := m.Watch("main", registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := subscribe(t, f)
	got.waitFor(t, "e1", hasIDs("e1"))
	reg("", "e2", 9002)
	got.waitFor(t, "e1 and e2", hasIDs("e1", "e2"))

	// A reload that changes the registry's settings rebuilds it, and the
	// feed follows the new one without being asked.
	if err := m.Apply(parse(t, fmt.Sprintf(yaml, etcd.Addr(), "/other"))); err != nil {
		t.Fatal(err)
	}
	got.waitFor(t, "the feed to follow the new prefix", hasIDs("x1"))
	if err := m.Apply(parse(t, "{}\n")); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); len(st) != 0 {
		t.Fatalf("a pruned registry still reports %+v", st)
	}
}

func TestApplyRefusesABrokenRegistryAndChangesNothing(t *testing.T) {
	m := New(quiet(), prometheus.NewRegistry())
	defer m.Close()
	tls := "registries:\n  main: {kind: etcd, address: '127.0.0.1:2379', tls: {ca_file: /nonexistent/ca.pem}}\n"
	cfg, err := config.Parse("t.yaml", []byte(tls))
	if err == nil {
		t.Fatalf("validation accepted a missing ca_file: %+v", cfg)
	}
	// Validation catches files; Apply's own errors (here: a kind this
	// Manager cannot open because the config was built by hand) leave the
	// running registries alone.
	if err := m.Apply(&config.Config{Registries: map[string]*config.RegistryBackend{"x": {Kind: "zookeeper"}}}); err == nil {
		t.Fatal("Apply accepted an unknown kind")
	}
	if _, err := m.Watch("x", registry.Query{Service: "s"}); err == nil {
		t.Fatal("a failed Apply left a registry behind")
	}
}

func TestStaticFileRegistryFeeds(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "services.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("services:\n  orders:\n    - {id: s1, address: 127.0.0.1, port: 9001}\n")
	m := New(quiet(), prometheus.NewRegistry())
	defer m.Close()
	if err := m.Apply(parse(t, fmt.Sprintf("registries:\n  files: {kind: static, file: %s}\n", file))); err != nil {
		t.Fatal(err)
	}
	f, err := m.Watch("files", registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := subscribe(t, f)
	got.waitFor(t, "s1", hasIDs("s1"))
	write("services:\n  orders:\n    - {id: s1, address: 127.0.0.1, port: 9001}\n    - {id: s2, address: 127.0.0.1, port: 9002, weight: 3}\n")
	in := got.waitFor(t, "s1 and s2", hasIDs("s1", "s2"))
	for _, x := range in {
		if x.ID == "s2" && x.EffectiveWeight() != 3 {
			t.Fatalf("s2 weight %d, want 3", x.Weight)
		}
	}
}
