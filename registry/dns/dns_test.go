package dns

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchboard-dev/switchboard/registry"
)

// zone is a DNS server of the test's own on loopback (UDP and TCP on the
// same port) serving records the test changes as it goes.
type zone struct {
	addr string

	mu       sync.Mutex
	records  map[string][]mdns.RR // by "name type", e.g. "api.test. A"
	noExtra  bool                 // leave the additional section empty
	rcode    int                  // force this rcode (0: answer normally)
	truncate bool                 // set TC on UDP answers, answer fully over TCP
	queries  []query
	queried  chan struct{} // closed and replaced on every query
}

type query struct {
	at   time.Time
	name string
	typ  string
	net  string
}

func startZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{records: map[string][]mdns.RR{}, queried: make(chan struct{})}
	// TCP first: its port space is the busier one (every test's client
	// connections); the same UDP port is then almost always free.
	var pc net.PacketConn
	var ln net.Listener
	var lastErr error
	for range 20 {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if pc, lastErr = net.ListenPacket("udp", ln.Addr().String()); lastErr == nil {
			break
		}
		ln.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatalf("no UDP+TCP port pair free on loopback: %v", lastErr)
	}
	z.addr = pc.LocalAddr().String()
	for _, s := range []*mdns.Server{
		{PacketConn: pc, Handler: mdns.HandlerFunc(z.serve("udp"))},
		{Listener: ln, Handler: mdns.HandlerFunc(z.serve("tcp"))},
	} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			s.Shutdown()
			<-done
		})
	}
	return z
}

func (z *zone) serve(network string) func(w mdns.ResponseWriter, req *mdns.Msg) {
	return func(w mdns.ResponseWriter, req *mdns.Msg) {
		q := req.Question[0]
		z.mu.Lock()
		defer z.mu.Unlock()
		z.queries = append(z.queries, query{time.Now(), q.Name, mdns.TypeToString[q.Qtype], network})
		close(z.queried)
		z.queried = make(chan struct{})
		m := new(mdns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		switch {
		case z.rcode != 0:
			m.Rcode = z.rcode
		case z.truncate && network == "udp":
			m.Truncated = true
		default:
			m.Answer = z.records[q.Name+" "+mdns.TypeToString[q.Qtype]]
			if len(m.Answer) == 0 {
				known := false
				for k := range z.records {
					known = known || strings.HasPrefix(k, q.Name+" ")
				}
				if !known {
					m.Rcode = mdns.RcodeNameError
				}
				m.Ns = []mdns.RR{rr("test. 60 IN SOA ns.test. admin.test. 1 60 60 60 2")}
			}
			if q.Qtype == mdns.TypeSRV && !z.noExtra {
				for _, a := range m.Answer {
					target := a.(*mdns.SRV).Target
					m.Extra = append(m.Extra, z.records[target+" A"]...)
					m.Extra = append(m.Extra, z.records[target+" AAAA"]...)
				}
			}
		}
		w.WriteMsg(m)
	}
}

func rr(s string) mdns.RR {
	r, err := mdns.NewRR(s)
	if err != nil {
		panic(err)
	}
	return r
}

// set replaces the records of "name type" with rrs given in zone-file form.
func (z *zone) set(key string, rrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(rrs) == 0 {
		delete(z.records, key)
		return
	}
	z.records[key] = nil
	for _, s := range rrs {
		z.records[key] = append(z.records[key], rr(s))
	}
}

func (z *zone) setFlags(f func(z *zone)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	f(z)
}

func (z *zone) queriesFor(name, typ string) []query {
	z.mu.Lock()
	defer z.mu.Unlock()
	var out []query
	for _, q := range z.queries {
		if q.name == name && q.typ == typ {
			out = append(out, q)
		}
	}
	return out
}

func newDNS(t *testing.T, cfg Config) *Registry {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func describe(in []registry.Instance) string {
	var b strings.Builder
	for i, x := range in {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(x.ID)
		b.WriteString("/w")
		b.WriteString(string(rune('0' + x.Weight)))
	}
	return b.String()
}

const srvName = "_http._tcp.orders.service.test."

func TestSRVGivesOneInstancePerTargetAddressWithWeights(t *testing.T) {
	z := startZone(t)
	z.set(srvName+" SRV",
		srvName+" 30 IN SRV 1 5 9001 a.node.test.",
		srvName+" 30 IN SRV 1 0 9002 b.node.test.",
		srvName+" 30 IN SRV 2 1 9003 backup.node.test.") // a higher priority: a fallback, not a share
	z.set("a.node.test. A", "a.node.test. 30 IN A 10.0.0.1")
	z.set("a.node.test. AAAA", "a.node.test. 30 IN AAAA fd00::1")
	z.set("b.node.test. A", "b.node.test. 30 IN A 10.0.0.2")
	z.set("backup.node.test. A", "backup.node.test. 30 IN A 10.0.0.3")
	r := newDNS(t, Config{Name: "_http._tcp.orders.service.test", Servers: []string{z.addr}})

	got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(got); d != "10.0.0.1:9001/w5 10.0.0.2:9002/w1 [fd00::1]:9001/w5" {
		t.Fatalf("instances = %s; want 10.0.0.1:9001/w5 10.0.0.2:9002/w1 [fd00::1]:9001/w5 (weight 0 is 1, priority 2 left out)", d)
	}
	if got[0].Service != "orders" || got[0].Address != "10.0.0.1" || got[0].Port != 9001 || got[0].Meta["target"] != "a.node.test" {
		t.Fatalf("instance = %+v", got[0])
	}
	if n := len(z.queriesFor("a.node.test.", "A")); n != 0 {
		t.Fatalf("resolved a target's A record %d times although the additional section had it", n)
	}

	// Without the additional section the targets are resolved one by one.
	z.setFlags(func(z *zone) { z.noExtra = true })
	got, err = r.Instances(ctxFor(t, 5*time.Second), registry.Query{Service: "orders"})
	if err != nil || describe(got) != "10.0.0.1:9001/w5 10.0.0.2:9002/w1 [fd00::1]:9001/w5" {
		t.Fatalf("without additional records: %s, %v", describe(got), err)
	}
	if n := len(z.queriesFor("a.node.test.", "AAAA")); n != 1 {
		t.Fatalf("AAAA queries for a target = %d; want 1", n)
	}
}

func TestARecordsWithAFixedPort(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 30 IN A 10.0.0.1", "api.test. 30 IN A 10.0.0.2")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 8443, Servers: []string{z.addr}})
	got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(got); d != "10.0.0.1:8443/w1 10.0.0.2:8443/w1" {
		t.Fatalf("instances = %s", d)
	}
	if got[0].Service != "api.test" {
		t.Fatalf("service of an instance without q.Service = %q; want the DNS name", got[0].Service)
	}
}

func TestNXDOMAINAndEmptyAnswersAreAnEmptySet(t *testing.T) {
	z := startZone(t)
	z.set("exists.test. TXT", `exists.test. 30 IN TXT "x"`)
	for _, name := range []string{"missing.test", "exists.test"} { // NXDOMAIN, NOERROR without records
		r := newDNS(t, Config{Name: name, Type: "a", Port: 80, Servers: []string{z.addr}})
		got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{})
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("%s: %#v, %v; want an empty non-nil set and no error", name, got, err)
		}
	}
}

func TestServerFailureIsAnErrorAndTheNextServerIsTried(t *testing.T) {
	bad, good := startZone(t), startZone(t)
	bad.setFlags(func(z *zone) { z.rcode = mdns.RcodeServerFailure })
	good.set("api.test. A", "api.test. 30 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{bad.addr, good.addr}})
	got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{})
	if err != nil || describe(got) != "10.0.0.1:80/w1" {
		t.Fatalf("with a failing first server: %s, %v; want the second server's answer", describe(got), err)
	}
	only := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{bad.addr}})
	if _, err := only.Instances(ctxFor(t, 5*time.Second), registry.Query{}); err == nil || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Fatalf("with only a failing server: %v; want an error naming SERVFAIL", err)
	}
}

func TestTruncatedAnswerIsRetriedOverTCP(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 30 IN A 10.0.0.1")
	z.setFlags(func(z *zone) { z.truncate = true })
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}})
	got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{})
	if err != nil || describe(got) != "10.0.0.1:80/w1" {
		t.Fatalf("%s, %v", describe(got), err)
	}
	qs := z.queriesFor("api.test.", "A")
	if len(qs) != 2 || qs[0].net != "udp" || qs[1].net != "tcp" {
		t.Fatalf("queries = %+v; want UDP then TCP", qs)
	}
}

// TestWatchReResolvesWhenTheTTLExpiresNotBefore: records with a 1s TTL
// are asked for again 1s after the answer, not sooner (MinTTL is 100ms, so
// the TTL, not the floor, decides), and a change is delivered then.
func TestWatchReResolvesWhenTheTTLExpiresNotBefore(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 1 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}, MinTTL: 100 * time.Millisecond})
	w, err := r.Watch(context.Background(), registry.Query{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx := ctxFor(t, 10*time.Second)
	first, err := w.Next(ctx)
	if err != nil || describe(first) != "10.0.0.1:80/w1" {
		t.Fatalf("first Next = %s, %v", describe(first), err)
	}
	z.set("api.test. A", "api.test. 1 IN A 10.0.0.2")
	second, err := w.Next(ctx)
	if err != nil || describe(second) != "10.0.0.2:80/w1" {
		t.Fatalf("second Next = %s, %v; want the changed record", describe(second), err)
	}
	qs := z.queriesFor("api.test.", "A")
	if len(qs) != 2 {
		t.Fatalf("%d A queries; want exactly 2 (no re-resolution before the TTL)", len(qs))
	}
	gap := qs[1].at.Sub(qs[0].at)
	if gap < time.Second-20*time.Millisecond || gap > 2*time.Second {
		t.Fatalf("re-resolved %v after the first answer; want when its 1s TTL ran out", gap)
	}
}

// TestWatchYieldsOnlyChanges: unchanged answers produce no snapshot; the
// floor decides the interval for TTL-0 records (Consul's default).
func TestWatchYieldsOnlyChanges(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 0 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}, MinTTL: 50 * time.Millisecond})
	w, _ := r.Watch(context.Background(), registry.Query{})
	defer w.Stop()
	ctx := ctxFor(t, 10*time.Second)
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// Next blocks through several unchanged answers; then the record
	// changes.
	done := make(chan []registry.Instance, 1)
	go func() {
		snap, _ := w.Next(ctx)
		done <- snap
	}()
	waitQueries(t, z, "api.test.", 4, 5*time.Second)
	z.set("api.test. A", "api.test. 0 IN A 10.0.0.9")
	select {
	case snap := <-done:
		if describe(snap) != "10.0.0.9:80/w1" {
			t.Fatalf("snapshot after unchanged answers then a change = %s; want only the change", describe(snap))
		}
	case <-ctx.Done():
		t.Fatal("no snapshot after the record changed")
	}
}

// waitQueries waits until the zone has answered n queries for name's A.
func waitQueries(t *testing.T, z *zone, name string, n int, limit time.Duration) {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		z.mu.Lock()
		ch := z.queried
		z.mu.Unlock()
		if len(z.queriesFor(name, "A")) >= n {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("fewer than %d queries for %s within %v", n, name, limit)
		}
	}
}

func TestWatchReturnsErrorsAndRecovers(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 0 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}, MinTTL: 50 * time.Millisecond})
	w, _ := r.Watch(context.Background(), registry.Query{})
	defer w.Stop()
	ctx := ctxFor(t, 10*time.Second)
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	z.setFlags(func(z *zone) { z.rcode = mdns.RcodeRefused })
	for i := range 2 { // every failed resolution is reported
		if _, err := w.Next(ctx); err == nil || !strings.Contains(err.Error(), "REFUSED") {
			t.Fatalf("Next %d while the server refuses = %v; want an error naming REFUSED", i, err)
		}
	}
	z.setFlags(func(z *zone) { z.rcode = 0 })
	z.set("api.test. A", "api.test. 0 IN A 10.0.0.2")
	snap, err := w.Next(ctx)
	if err != nil || describe(snap) != "10.0.0.2:80/w1" {
		t.Fatalf("Next after recovery = %s, %v", describe(snap), err)
	}
	w.Stop()
	if _, err := w.Next(ctx); err == nil {
		t.Fatal("Next after Stop returned no error")
	}
}

// Regression: an error did not reset what the caller was known to have, so
// after a transient SERVFAIL the next answer, being the same records as
// before, never returned and the discovery cache stayed stale.
func TestWatchFirstNextAfterServerFailureReturnsTheUnchangedSet(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 0 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}, MinTTL: 50 * time.Millisecond})
	w, _ := r.Watch(context.Background(), registry.Query{})
	defer w.Stop()
	if _, err := w.Next(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	z.setFlags(func(z *zone) { z.rcode = mdns.RcodeServerFailure })
	if _, err := w.Next(ctxFor(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Fatalf("Next while the server fails = %v; want an error naming SERVFAIL", err)
	}
	z.setFlags(func(z *zone) { z.rcode = 0 }) // the same record as before
	snap, err := w.Next(ctxFor(t, 2*time.Second))
	if err != nil || describe(snap) != "10.0.0.1:80/w1" {
		t.Fatalf("first Next after the server recovered = %s, %v; want the unchanged 10.0.0.1:80/w1 at once", describe(snap), err)
	}
}

// After ctx ends while Next waits for the TTL, the next Next returns the
// last answer at once (its TTL still runs, so it is the current set) without
// asking the server again, and the Next after that waits for a change.
func TestWatchFirstNextAfterCtxEndedReturnsTheLastAnswerAtOnce(t *testing.T) {
	z := startZone(t)
	z.set("api.test. A", "api.test. 60 IN A 10.0.0.1")
	r := newDNS(t, Config{Name: "api.test", Type: "a", Port: 80, Servers: []string{z.addr}})
	w, _ := r.Watch(context.Background(), registry.Query{})
	defer w.Stop()
	if _, err := w.Next(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next whose ctx ends within the 60s TTL = %v; want context.DeadlineExceeded", err)
	}
	snap, err := w.Next(ctxFor(t, 2*time.Second))
	if err != nil || describe(snap) != "10.0.0.1:80/w1" {
		t.Fatalf("first Next after the ctx error = %s, %v; want the last answer 10.0.0.1:80/w1 at once", describe(snap), err)
	}
	if n := len(z.queriesFor("api.test.", "A")); n != 1 {
		t.Fatalf("the server got %d queries; want 1 (the answer's 60s TTL has not run out)", n)
	}
	short2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if snap, err := w.Next(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next after the catch-up = %s, %v; want it to wait for the TTL (and its ctx to end)", describe(snap), err)
	}
}

func TestClampTTL(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{30 * time.Second, 30 * time.Second},
		{time.Hour, 5 * time.Minute},
	} {
		if got := ClampTTL(c.ttl, time.Second, 5*time.Minute); got != c.want {
			t.Errorf("ClampTTL(%v, 1s, 5m) = %v; want %v", c.ttl, got, c.want)
		}
	}
}

func TestNegativeAnswerIsCachedForTheSOAMinimum(t *testing.T) {
	z := startZone(t) // its SOA: TTL 60, MINIMUM 2
	r := newDNS(t, Config{Name: "missing.test", Type: "a", Port: 80, Servers: []string{z.addr}})
	_, ttl, err := r.resolve(ctxFor(t, 5*time.Second), r.name, "")
	if err != nil || ttl != 2*time.Second {
		t.Fatalf("negative TTL = %v, %v; want 2s (min of SOA TTL 60 and MINIMUM 2)", ttl, err)
	}
}

func TestNewAndQueriesRejectBadInput(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a..b"}, "name:"},
		{Config{Name: "x", Type: "mx", Servers: []string{"127.0.0.1"}}, "type: \"mx\""},
		{Config{Name: "x", Type: "a", Servers: []string{"127.0.0.1"}}, "port: 0"},
		{Config{Name: "x", Servers: []string{"127.0.0.1"}, MinTTL: time.Minute, MaxTTL: time.Second}, "max_ttl"},
		{Config{Name: "x", Servers: []string{"127.0.0.1:99999"}}, "servers[0]"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v; want an error containing %q", c.cfg, err, c.want)
		}
	}
	r := newDNS(t, Config{Name: "x", Servers: []string{"127.0.0.1"}})
	if _, err := r.Watch(context.Background(), registry.Query{Tags: []string{"v1"}}); err == nil || !strings.Contains(err.Error(), "tags:") {
		t.Fatalf("Watch with tags = %v; want an error naming tags", err)
	}
	perQuery := newDNS(t, Config{Servers: []string{"127.0.0.1"}})
	if _, err := perQuery.Instances(context.Background(), registry.Query{}); err == nil || !strings.Contains(err.Error(), "service: must be the DNS name") {
		t.Fatalf("Instances without a name anywhere = %v", err)
	}
	if r.servers[0] != "127.0.0.1:53" {
		t.Fatalf("server without a port = %q; want port 53", r.servers[0])
	}
}

// TestQueryServiceIsTheNameWhenConfigHasNone: one Registry, several names.
func TestQueryServiceIsTheNameWhenConfigHasNone(t *testing.T) {
	z := startZone(t)
	z.set("a.test. A", "a.test. 30 IN A 10.0.0.1")
	z.set("b.test. A", "b.test. 30 IN A 10.0.0.2")
	r := newDNS(t, Config{Type: "a", Port: 80, Servers: []string{z.addr}})
	for name, want := range map[string]string{"a.test": "10.0.0.1:80/w1", "b.test.": "10.0.0.2:80/w1"} {
		got, err := r.Instances(ctxFor(t, 5*time.Second), registry.Query{Service: name})
		if err != nil || describe(got) != want {
			t.Fatalf("Instances(%s) = %s, %v; want %s", name, describe(got), err, want)
		}
		if got[0].Service != name {
			t.Fatalf("service = %q; want the query's %q", got[0].Service, name)
		}
	}
}
