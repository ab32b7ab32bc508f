package tcpproxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// testUpstream is a real pool behind a real balancer.
type testUpstream struct {
	name string
	pool *endpoint.Pool
	bal  balance.Balancer
	// onPick, if set, sees every Info the listener picks with.
	onPick func(info *balance.Info)
}

func newUpstream(t testing.TB, name string, bc balance.Config, addrs ...string) *testUpstream {
	t.Helper()
	bal, err := balance.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	u := &testUpstream{name: name, pool: endpoint.NewPool(name), bal: bal}
	t.Cleanup(u.pool.Subscribe(bal.Update))
	specs := make([]endpoint.Spec, len(addrs))
	for i, a := range addrs {
		specs[i] = endpoint.Spec{Address: a}
	}
	u.pool.Update(specs)
	return u
}

func rr() balance.Config { return balance.Config{Policy: balance.RoundRobinName} }

func (u *testUpstream) Name() string { return u.name }

func (u *testUpstream) Pick(info *balance.Info) (balance.Result, error) {
	if u.onPick != nil {
		u.onPick(info)
	}
	return u.bal.Pick(info)
}

// endpoint returns the pool's endpoint for addr.
func (u *testUpstream) endpoint(t testing.TB, addr string) *endpoint.Endpoint {
	t.Helper()
	for _, ep := range u.pool.Snapshot().All {
		if ep.Address() == addr {
			return ep
		}
	}
	t.Fatalf("upstream %s has no endpoint %s", u.name, addr)
	return nil
}

// server is a real TCP server whose connections run handler. kill closes
// its listener and every connection it has open, as a crashed process would.
type server struct {
	ln    *net.TCPListener
	addr  string
	mu    sync.Mutex
	conns map[*net.TCPConn]struct{}
	dead  bool
	wg    sync.WaitGroup
	// accepted counts connections accepted.
	accepted chan struct{}
	count    int
}

func startServer(t testing.TB, handler func(c *net.TCPConn)) *server {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, addr: ln.Addr().String(), conns: map[*net.TCPConn]struct{}{}, accepted: make(chan struct{}, 1<<16)}
	s.wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.dead {
				s.mu.Unlock()
				c.Close()
				continue
			}
			s.conns[c] = struct{}{}
			s.count++
			s.mu.Unlock()
			select {
			case s.accepted <- struct{}{}:
			default:
			}
			s.wg.Go(func() {
				defer func() {
					c.Close()
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
				}()
				handler(c)
			})
		}
	})
	t.Cleanup(func() {
		s.kill()
		s.wg.Wait()
	})
	return s
}

func (s *server) kill() {
	s.mu.Lock()
	s.dead = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
}

func (s *server) accepts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// echo sends back what it reads and passes the EOF on.
func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

// named writes "name\n", then echoes.
func named(name string) func(c *net.TCPConn) {
	return func(c *net.TCPConn) {
		if _, err := c.Write([]byte(name + "\n")); err != nil {
			return
		}
		echo(c)
	}
}

type proxy struct {
	l      *Listener
	m      *Metrics
	addr   string
	served chan error
	ups    []*testUpstream
	logs   *syncBuffer
}

// startProxy serves cfg on a loopback port with ups as its upstreams, and
// at the end of the test shuts it down and checks that every pick was
// Done (no endpoint left with anything in flight).
func startProxy(t testing.TB, cfg Config, ups ...*testUpstream) *proxy {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startProxyOn(t, ln, cfg, ups...)
}

// startProxyOn is startProxy on a listening socket of the test's.
func startProxyOn(t testing.TB, ln *net.TCPListener, cfg Config, ups ...*testUpstream) *proxy {
	t.Helper()
	byName := map[string]*testUpstream{}
	for _, u := range ups {
		byName[u.name] = u
	}
	var mu sync.Mutex
	lookup := func(name string) Upstream {
		mu.Lock()
		defer mu.Unlock()
		if u := byName[name]; u != nil {
			return u
		}
		return nil
	}
	cfg = useTestEngine(cfg)
	logs := &syncBuffer{}
	m := NewMetrics(prometheus.NewRegistry())
	l, err := NewListener(ln, cfg, lookup, m, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	p := &proxy{l: l, m: m, addr: ln.Addr().String(), served: make(chan error, 1), ups: ups, logs: logs}
	go func() { p.served <- l.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Shutdown(ctx)
		select {
		case err := <-p.served:
			if err != nil {
				t.Errorf("Serve returned %v after Shutdown, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return within 5s of Shutdown")
		}
		for _, u := range ups {
			for _, ep := range u.pool.Snapshot().All {
				if n := ep.InFlight(); n != 0 {
					t.Errorf("endpoint %s of %s: %d picks not Done after shutdown", ep.Address(), u.name, n)
				}
			}
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", logs.String())
		}
	})
	return p
}

// useTestEngine puts cfg, when it names no engine, on the engine
// SWITCHBOARD_TEST_ENGINE names (goroutine or eventloop; the event loop
// only where it has cfg's features), so that the package's tests run on
// either engine unchanged (scripts/test.sh runs them a second time with
// goroutine). Unset, cfg keeps auto. A test that names an engine gets it.
func useTestEngine(cfg Config) Config {
	e := os.Getenv("SWITCHBOARD_TEST_ENGINE")
	if cfg.Engine != "" || e == "" || (e == EngineEventLoop && cfg.LoopFeatureMissing() != "") {
		return cfg
	}
	cfg.Engine = e
	return cfg
}

func (p *proxy) dial(t testing.TB) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func (p *proxy) rejected(reason string) float64 {
	return metricValue(p.m.rejected.WithLabelValues(p.l.name, reason))
}

func (p *proxy) closed(cause string) float64 {
	return metricValue(p.m.closed.WithLabelValues(p.l.name, cause))
}

func (p *proxy) connectErrors(up, addr string) float64 {
	return metricValue(p.m.connectErrs.WithLabelValues(p.l.name, up, addr))
}

// metricValue reads one counter or gauge.
func metricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	panic("not a counter or gauge")
}

func promValue(p *proxy, up, addr, dir string) float64 {
	return metricValue(p.m.bytes.WithLabelValues(p.l.name, up, addr, dir))
}

func (p *proxy) forwarded(up, addr string) float64 {
	return metricValue(p.m.total.WithLabelValues(p.l.name, up, addr))
}

// roundTrip writes msg on c and reads back exactly len(msg) bytes.
func roundTrip(t testing.TB, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo: got %q, want %q", got, msg)
	}
}

// readLine reads one "\n"-terminated line (the named backends' greeting).
func readLine(t testing.TB, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var b strings.Builder
	one := make([]byte, 1)
	for b.Len() < 256 {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("read greeting: %v (so far %q)", err, b.String())
		}
		if one[0] == '\n' {
			return b.String()
		}
		b.WriteByte(one[0])
	}
	t.Fatalf("greeting longer than 256 bytes: %q", b.String())
	return ""
}

// expectClosed waits up to within for c to be closed by the proxy (EOF or
// reset, with no data), and returns how long that took.
func expectClosed(t testing.TB, c net.Conn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(within))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		t.Fatalf("expected the proxy to close the connection, read %q", buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v, want it closed", within)
	}
	if err == nil {
		t.Fatal("read returned no data and no error")
	}
	return time.Since(start)
}

// blackhole returns an address where a dial hangs: a listening socket with
// a backlog of 0 whose accept queue is already full, so the kernel drops
// further SYNs.
func blackhole(t testing.TB) string {
	t.Helper()
	lc := net.ListenConfig{}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := listenBacklog0(rc); err != nil {
		t.Skipf("cannot shrink the backlog: %v", err)
	}
	addr := ln.Addr().String()
	// Fill the accept queue; stop at the first dial that hangs.
	for i := 0; i < 8; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr
			}
			t.Fatalf("filling the blackhole's queue: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("could not make a dial hang (the kernel keeps accepting past the backlog)")
	return ""
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ciRequires skips the test for a missing tool locally; under CI=true it
// fails, naming the package that provides it.
func ciRequires(t testing.TB, bin, pkg string) string {
	t.Helper()
	p, err := lookPath(bin)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed and CI=true: this test needs it (apt-get install %s)", bin, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s); CI runs this test", bin, pkg)
	}
	return p
}

var lookPath = exec.LookPath
