package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/client"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// A YAML file with the proxy's upstream and route keys builds a client
// that does what it says: round robin over the targets, a route's retry
// on 503 for GETs under /api, and its fallback marked degraded.
func TestAYAMLConfigurationRoundTrip(t *testing.T) {
	a := newBackend(t, "a", nil)
	flaky := newBackend(t, "flaky", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	down := newBackend(t, "down", nil)
	down.srv.Close()
	yaml := `
upstreams:
  orders:
    balance: {policy: round_robin}
    targets:
      - {address: ` + a.addr() + `}
      - {address: ` + flaky.addr() + `}
    timeouts: {connect: 500ms}
  prices:
    targets: [{address: ` + down.addr() + `}]
routes:
  - name: orders-api
    match: {path_prefix: /api, methods: [get]}
    upstream: orders
    timeout: 5s
    retry: {attempts: 2, statuses: [503], backoff_base: 1ms}
  - upstream: prices
    fallback:
      steps:
        - {type: static, status: 200, body: "42", headers: {Content-Type: text/plain}}
`
	path := filepath.Join(t.TempDir(), "client.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := client.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes[1].Name != "client/1" || cfg.Upstreams["orders"].Balance.Policy != "round_robin" {
		t.Fatalf("defaults: route name %q, policy %q", cfg.Routes[1].Name, cfg.Upstreams["orders"].Balance.Policy)
	}
	c := newClient(t, client.WithConfig(cfg))
	if got := c.Services(); !slices.Equal(got, []string{"orders", "prices"}) {
		t.Fatalf("services %v, want orders and prices", got)
	}
	hc := c.HTTPClient()
	// The route retries the 503 on the other endpoint: every GET is a.
	for i := 0; i < 6; i++ {
		if st, body := get(t, hc, "http://orders/api/list"); st != 200 || body != "a" {
			t.Fatalf("GET /api/list %d: %d %q, want 200 from a", i, st, body)
		}
	}
	// Outside the route, nothing retries a 503.
	statuses := map[int]int{}
	for i := 0; i < 4; i++ {
		st, _ := get(t, hc, "http://orders/other")
		statuses[st]++
	}
	if statuses[200] != 2 || statuses[503] != 2 {
		t.Fatalf("GET /other answers %v, want two 200s and two 503s (round robin, no retry)", statuses)
	}
	resp, err := hc.Get("http://prices/eur")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if reason, ok := client.Degraded(resp); !ok || reason != "static: retries_exhausted" || string(body) != "42" {
		t.Fatalf("prices: %q degraded=%v %q, want \"42\" degraded \"static: retries_exhausted\"", body, ok, reason)
	}
}

// A bad file gives every problem as FILE:LINE:COL: message, the checks of
// the proxy's file, plus the keys a client does not use.
func TestABadYAMLConfigurationGivesFileLineCol(t *testing.T) {
	yaml := `upstreams:
  orders:
    targets: [{address: "127.0.0.1:9001"}]
    breaker: {open: 1s}
routes:
  - match: {host: orders.example.com}
    upstream: ordrs
    retry: {attempts: 0.5}
listeners: []
`
	_, err := client.ParseConfig([]byte(yaml), "client.yaml")
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %T %v, want config.Errors", err, err)
	}
	var lines []string
	for _, p := range errs {
		lines = append(lines, p.String())
	}
	want := []string{
		`client.yaml:4:15: unknown key "open" in breaker (known: window_type, window_size, window, buckets, min_requests, failure_rate, failure_count, slow_threshold, slow_rate, consecutive_failures, open_for, max_open_for, half_open_probes, failure_statuses)`,
		`client.yaml:6:13: match.host is not used by a client: the host of a call names its upstream`,
		`client.yaml:7:15: route upstream "ordrs" is not defined (defined: orders)`,
		`client.yaml:8:23: expected an integer, got "0.5"`,
		`client.yaml:9:1: unknown key "listeners" at the top level of a client configuration (known: upstreams, registries, routes, discovery)`,
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// An upstream with discovery follows the registry the program gives under
// the name its discovery.registry says; a name not given is an error.
func TestAYAMLUpstreamDiscoversThroughAGivenRegistry(t *testing.T) {
	_, reg := startRegistry(t)
	a := newBackend(t, "a", nil)
	register(t, reg, "orders-svc", "orders-1", a)
	cfg, err := client.ParseConfig([]byte(`
upstreams:
  orders:
    discovery: {registry: consul, service: orders-svc}
discovery: {empty_grace: 5s}
`), "client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(client.WithConfig(cfg), client.WithLogger(quiet())); err == nil || !strings.Contains(err.Error(), `registry "consul" is not given`) {
		t.Fatalf("without the registry: %v, want an error naming it", err)
	}
	c := newClient(t, client.WithConfig(cfg), client.WithRegistry("consul", reg))
	endpointtest.WaitReady(t, c.Upstream("orders").Pool(), 1)
	if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("%d %q", st, body)
	}
	if cfg.Discovery.EmptyGrace.Std() != 5*time.Second {
		t.Fatalf("empty_grace %v", cfg.Discovery.EmptyGrace)
	}
}

// protocol: h2c speaks cleartext HTTP/2 to the upstream's endpoints.
func TestAYAMLUpstreamSpeaksH2C(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	defer srv.Close()
	cfg, err := client.ParseConfig([]byte(`
upstreams:
  grpcish:
    protocol: h2c
    targets: [{address: "`+srv.Listener.Addr().String()+`"}]
  plain:
    targets: [{address: "`+srv.Listener.Addr().String()+`"}]
`), "client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, client.WithConfig(cfg))
	for host, want := range map[string]string{"grpcish": "HTTP/2.0", "plain": "HTTP/1.1"} {
		if st, body := get(t, c.HTTPClient(), "http://"+host+"/"); st != 200 || body != want {
			t.Errorf("%s: %d %q, want the endpoint to see %s", host, st, body, want)
		}
	}
}

// A registries block is opened by the client itself: an upstream that
// names its entry discovers through it with nothing given in Go, and a
// registry given in Go under the same name wins over the entry.
func TestAYAMLRegistriesBlockIsOpenedByTheClient(t *testing.T) {
	srv, reg := startRegistry(t)
	a := newBackend(t, "a", nil)
	register(t, reg, "orders-svc", "orders-1", a)
	cfg, err := client.ParseConfig([]byte(`
registries:
  fleet: {kind: consul, address: "`+srv.Addr()+`"}
upstreams:
  orders:
    discovery: {registry: fleet, service: orders-svc}
`), "client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, client.WithConfig(cfg))
	endpointtest.WaitReady(t, c.Upstream("orders").Pool(), 1)
	if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("%d %q", st, body)
	}

	// The program's own registry of that name is used instead: one that
	// knows another instance under the service.
	_, otherReg := startRegistry(t)
	b := newBackend(t, "b", nil)
	register(t, otherReg, "orders-svc", "orders-2", b)
	c2 := newClient(t, client.WithConfig(cfg), client.WithRegistry("fleet", otherReg))
	endpointtest.WaitReady(t, c2.Upstream("orders").Pool(), 1)
	if st, body := get(t, c2.HTTPClient(), "http://orders/"); st != 200 || body != "b" {
		t.Fatalf("with the program's registry: %d %q, want b's answer", st, body)
	}

	// A bad entry is reported at its place.
	_, err = client.ParseConfig([]byte("registries:\n  fleet: {kind: zookeeper}\n"), "client.yaml")
	if err == nil || !strings.Contains(err.Error(), `client.yaml:2:17: unknown registry kind "zookeeper"`) {
		t.Fatalf("bad kind: %v", err)
	}
}

// countingTransport counts the requests it sends.
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// The program's options win over a YAML configuration's, in any order:
// WithTransport sends the YAML services' requests too, and the YAML
// discovery block fills only what WithDiscoveryOptions leaves unset.
func TestProgramOptionsWinOverTheYAMLInAnyOrder(t *testing.T) {
	_, reg := startRegistry(t)
	a := newBackend(t, "a", nil)
	register(t, reg, "orders-svc", "orders-1", a)
	dir := t.TempDir()
	cfg, err := client.ParseConfig([]byte(`
upstreams:
  orders:
    discovery: {registry: consul, service: orders-svc}
    timeouts: {connect: 2s}
discovery: {cache_dir: "`+dir+`"}
`), "client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{rt: http.DefaultTransport}
	// The discovery options come after WithConfig and set only a backoff:
	// the YAML's cache_dir still applies.
	c := newClient(t, client.WithConfig(cfg), client.WithRegistry("consul", reg), client.WithTransport(ct),
		client.WithDiscoveryOptions(discovery.Options{MinBackoff: 50 * time.Millisecond}))
	endpointtest.WaitReady(t, c.Upstream("orders").Pool(), 1)
	if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("%d %q", st, body)
	}
	if n := ct.n.Load(); n != 1 {
		t.Fatalf("WithTransport sent %d requests, want 1: the YAML service used a transport of its own", n)
	}
	testutil.WaitFor(t, 10*time.Second, "the discovery cache to be written in the YAML's cache_dir", func() bool {
		files, _ := os.ReadDir(dir)
		return len(files) > 0
	})
}

// A service declared with capitals is discovered under its name as
// declared: registries may be case-sensitive.
func TestADeclaredNameKeepsItsCaseInTheRegistryQuery(t *testing.T) {
	_, reg := startRegistry(t)
	a := newBackend(t, "a", nil)
	register(t, reg, "Orders", "orders-1", a)
	c := newClient(t, client.WithRegistry("consul", reg), client.WithService("Orders", client.Service{}))
	endpointtest.WaitReady(t, c.Upstream("orders").Pool(), 1)
	if st, body := get(t, c.HTTPClient(), "http://orders/"); st != 200 || body != "a" {
		t.Fatalf("%d %q", st, body)
	}
}
