package tcpproxy

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

func TestEchoThroughProxy(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)

	c := p.dial(t)
	roundTrip(t, c, "hello")
	roundTrip(t, c, "again")
	c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after CloseWrite: read %q, %v; want EOF", rest, err)
	}
	c.Close()
	// The close is counted before the connection lets go of its slots:
	// wait for both.
	testutil.WaitFor(t, 5*time.Second, "the connection to be counted closed and let go", func() bool {
		st := p.l.Stats()
		return p.closed(CloseDone) == 1 && st.Active == 0 && len(st.Endpoints) == 1 && st.Endpoints[0].Active == 0
	})
	if got := p.forwarded("app", b.addr); got != 1 {
		t.Errorf("switchboard_tcp_connections_total = %v, want 1", got)
	}
	for dir, want := range map[string]float64{DirDownstreamRx: 10, DirUpstreamRx: 10} {
		if got := promValue(p, "app", b.addr, dir); got != want {
			t.Errorf("received bytes %s = %v, want %v", dir, got, want)
		}
	}
	if st := p.l.Stats(); st.Accepted != 1 || st.Active != 0 || len(st.Endpoints) != 1 || st.Endpoints[0].Total != 1 {
		t.Errorf("Stats = %+v, want 1 accepted, 0 active, 1 endpoint with total 1", st)
	}
}

// TestBulkTransferChecksum pushes 64 MiB each way through the proxy (an
// echo backend) and compares checksums.
func TestBulkTransferChecksum(t *testing.T) {
	const size = 64 << 20
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: 2 * time.Second}, up)
	c := p.dial(t)
	c.SetDeadline(time.Now().Add(60 * time.Second))

	sent := sha256.New()
	werr := make(chan error, 1)
	go func() {
		rng := rand.NewChaCha8([32]byte{1, 2, 3})
		buf := make([]byte, 256<<10)
		for n := 0; n < size; n += len(buf) {
			rng.Read(buf)
			sent.Write(buf)
			if _, err := c.Write(buf); err != nil {
				werr <- err
				return
			}
		}
		werr <- c.CloseWrite()
	}()
	recv := sha256.New()
	n, err := io.Copy(recv, c)
	if err != nil {
		t.Fatalf("reading the echo: %v after %d bytes", err, n)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if n != size {
		t.Fatalf("received %d bytes, want %d", n, size)
	}
	if !bytes.Equal(sent.Sum(nil), recv.Sum(nil)) {
		t.Fatal("checksum of the echoed bytes differs from what was sent")
	}
	c.Close()
	testutil.WaitFor(t, 5*time.Second, "the connection to end", func() bool { return p.closed(CloseDone) == 1 })
	for _, dir := range []string{DirDownstreamRx, DirUpstreamRx} {
		if got := promValue(p, "app", b.addr, dir); got != size {
			t.Errorf("received bytes %s = %v, want %d", dir, got, size)
		}
	}
}

// TestHalfCloseClientFirst: the client closes its write side; the backend
// reads EOF and only then sends its reply, which the client still gets.
func TestHalfCloseClientFirst(t *testing.T) {
	b := startServer(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "got %d bytes", n)
		c.CloseWrite()
	})
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	c := p.dial(t)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(bytes.Repeat([]byte("x"), 1000)); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the reply after half-close: %v", err)
	}
	if string(reply) != "got 1000 bytes" {
		t.Fatalf("reply %q, want %q", reply, "got 1000 bytes")
	}
}

// TestHalfCloseUpstreamFirst: the backend sends a banner and closes its
// write side; the client reads EOF and can still send.
func TestHalfCloseUpstreamFirst(t *testing.T) {
	got := make(chan string, 1)
	b := startServer(t, func(c *net.TCPConn) {
		c.Write([]byte("banner"))
		c.CloseWrite()
		data, _ := io.ReadAll(c)
		got <- string(data)
	})
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	c := p.dial(t)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	banner, err := io.ReadAll(c)
	if err != nil || string(banner) != "banner" {
		t.Fatalf("read %q, %v; want \"banner\" then EOF", banner, err)
	}
	if _, err := c.Write([]byte("after eof")); err != nil {
		t.Fatalf("write after the backend's half-close: %v", err)
	}
	c.CloseWrite()
	select {
	case s := <-got:
		if s != "after eof" {
			t.Fatalf("backend read %q, want %q", s, "after eof")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend never got the client's bytes and EOF")
	}
}

func TestIdleTimeoutClosesSilentConnection(t *testing.T) {
	const idle = 200 * time.Millisecond
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: idle}, up)
	c := p.dial(t)
	roundTrip(t, c, "ping")
	took := expectClosed(t, c, 5*time.Second)
	if took < idle-idle/4 { // the roundTrip's bytes may be seen a check late, never early
		t.Errorf("closed after %v of silence, before idle_timeout %v", took, idle)
	}
	testutil.WaitFor(t, 5*time.Second, "closed{cause=idle_timeout}", func() bool { return p.closed(CloseIdle) == 1 })
}

func TestIdleTimeoutSparesActiveConnection(t *testing.T) {
	const idle = 400 * time.Millisecond
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: idle}, up)
	c := p.dial(t)
	// One byte each way every idle/8, for 2 idle timeouts.
	tick := time.NewTicker(idle / 8)
	defer tick.Stop()
	for i := 0; i < 16; i++ {
		<-tick.C
		roundTrip(t, c, "k")
	}
	if n := p.closed(CloseIdle); n != 0 {
		t.Fatalf("an active connection was closed as idle (%v)", n)
	}
	expectClosed(t, c, 5*time.Second) // and once quiet, it goes
}

func TestIdleTimeoutOff(t *testing.T) {
	s, err := compile(Config{Name: "t", Upstream: "u", IdleTimeout: NoIdleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.IdleTimeout > 0 || s.checkEvery != maxCheckEvery {
		t.Fatalf("NoIdleTimeout: idle %v, checks every %v; want off, every %v (byte counters only)", s.cfg.IdleTimeout, s.checkEvery, maxCheckEvery)
	}
}

func TestConnectRefusedRetriesNextEndpoint(t *testing.T) {
	good := startServer(t, echo)
	refused := testutil.DeadAddr(t)
	up := newUpstream(t, "app", rr(), refused, good.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	for i := 0; i < 4; i++ {
		c := p.dial(t)
		roundTrip(t, c, fmt.Sprintf("conn %d", i))
		c.Close()
	}
	if n := p.connectErrors("app", refused); n < 1 {
		t.Errorf("connect errors for the refusing endpoint = %v, want at least 1 (round robin reaches it)", n)
	}
	if n := p.rejected(RejectConnect); n != 0 {
		t.Errorf("rejected{connect_failed} = %v, want 0: every connection had a good endpoint to retry on", n)
	}
}

func TestConnectTimeoutRetriesNextEndpoint(t *testing.T) {
	const timeout = 150 * time.Millisecond
	good := startServer(t, echo)
	hole := blackhole(t)
	up := newUpstream(t, "app", rr(), hole, good.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", ConnectTimeout: timeout}, up)
	// Round robin reaches the blackhole within two connections; the one
	// that does waits out the connect timeout, then succeeds elsewhere.
	for i := 0; i < 2 && p.connectErrors("app", hole) == 0; i++ {
		start := time.Now()
		c := p.dial(t)
		roundTrip(t, c, "through")
		took := time.Since(start)
		c.Close()
		if n := p.connectErrors("app", hole); n == 1 && took < timeout {
			t.Errorf("the connection that met the blackhole took %v, want at least the connect timeout %v", took, timeout)
		}
	}
	if n := p.connectErrors("app", hole); n != 1 {
		t.Errorf("connect errors for the blackhole = %v, want 1", n)
	}
}

func TestConnectAttemptsExhausted(t *testing.T) {
	a, b := testutil.DeadAddr(t), testutil.DeadAddr(t)
	up := newUpstream(t, "app", rr(), a, b)
	p := startProxy(t, Config{Name: "t", Upstream: "app", ConnectAttempts: 2}, up)
	c := p.dial(t)
	expectClosed(t, c, 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "rejected{connect_failed}", func() bool { return p.rejected(RejectConnect) == 1 })
	if got := p.connectErrors("app", a) + p.connectErrors("app", b); got != 2 {
		t.Errorf("connect errors = %v, want 2 (connect_attempts)", got)
	}
}

func TestNoEndpointAndNoUpstream(t *testing.T) {
	empty := newUpstream(t, "empty", rr())
	p := startProxy(t, Config{Name: "t", Upstream: "empty"}, empty)
	expectClosed(t, p.dial(t), 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "rejected{no_endpoint}", func() bool { return p.rejected(RejectNoEndpoint) == 1 })

	p2 := startProxy(t, Config{Name: "t2", Upstream: "missing"})
	expectClosed(t, p2.dial(t), 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "rejected{no_upstream}", func() bool { return p2.rejected(RejectNoUpstream) == 1 })
}

func TestMaxConnsClosesOverLimit(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", MaxConns: 1}, up)
	c1 := p.dial(t)
	roundTrip(t, c1, "first")
	c2 := p.dial(t)
	if took := expectClosed(t, c2, 5*time.Second); took > time.Second {
		t.Errorf("over-limit connection closed after %v, want at once", took)
	}
	if n := p.rejected(RejectLimit); n != 1 {
		t.Errorf("rejected{limit} = %v, want 1", n)
	}
	roundTrip(t, c1, "first still works")
	c1.Close()
	testutil.WaitFor(t, 5*time.Second, "the slot to be free", func() bool { return p.l.Stats().Active == 0 })
	roundTrip(t, p.dial(t), "a new one fits")
}

func TestQueueAdmitsWhenSlotFrees(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", MaxConns: 1, QueueSize: 1, QueueTimeout: 10 * time.Second}, up)
	c1 := p.dial(t)
	roundTrip(t, c1, "first")
	c2 := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the second connection to be queued", func() bool { return p.l.Stats().Queued == 1 })
	c3 := p.dial(t)
	expectClosed(t, c3, 5*time.Second) // queue full
	if n := p.rejected(RejectLimit); n != 1 {
		t.Errorf("rejected{limit} = %v, want 1 (the third, with the queue full)", n)
	}
	if b.accepts() != 1 {
		t.Fatalf("backend saw %d connections while the second was queued, want 1", b.accepts())
	}
	c1.Close()
	roundTrip(t, c2, "second, after the first left")
	if q := p.l.Stats().Queued; q != 0 {
		t.Errorf("Queued = %d after admission, want 0", q)
	}
}

func TestQueueTimeout(t *testing.T) {
	const wait = 100 * time.Millisecond
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", MaxConns: 1, QueueSize: 4, QueueTimeout: wait}, up)
	c1 := p.dial(t)
	roundTrip(t, c1, "first")
	c2 := p.dial(t)
	if took := expectClosed(t, c2, 5*time.Second); took < wait-10*time.Millisecond {
		t.Errorf("queued connection closed after %v, before queue_timeout %v", took, wait)
	}
	testutil.WaitFor(t, 5*time.Second, "rejected{queue_timeout}", func() bool { return p.rejected(RejectQueueTimeout) == 1 })
	roundTrip(t, c1, "first unaffected")
}

func TestUpdateRaisingMaxConnsAdmitsQueued(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	cfg := Config{Name: "t", Upstream: "app", MaxConns: 1, QueueSize: 1, QueueTimeout: 10 * time.Second}
	p := startProxy(t, cfg, up)
	c1 := p.dial(t)
	roundTrip(t, c1, "first")
	c2 := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the second connection to be queued", func() bool { return p.l.Stats().Queued == 1 })
	cfg.MaxConns = 2
	if err := p.l.Update(cfg); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c2, "let in by the new limit")
	roundTrip(t, c1, "first unaffected")
}

// TestMaxConnsPerEndpointSkipsFullEndpoint: consistent hashing sends every
// connection from 127.0.0.1 to the same endpoint; once it is full the next
// one goes elsewhere, and with all full the connection is closed.
func TestMaxConnsPerEndpointSkipsFullEndpoint(t *testing.T) {
	a := startServer(t, named("a"))
	b := startServer(t, named("b"))
	up := newUpstream(t, "app", balance.Config{Policy: balance.ConsistentHashName, HashKey: "client_ip"}, a.addr, b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", MaxConnsPerEndpoint: 1}, up)
	c1 := p.dial(t)
	first := readLine(t, c1)
	c2 := p.dial(t)
	second := readLine(t, c2)
	if first == second {
		t.Fatalf("both connections went to %s, which allows one", first)
	}
	c3 := p.dial(t)
	expectClosed(t, c3, 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "rejected{endpoint_limit}", func() bool { return p.rejected(RejectEndpointLimit) == 1 })
	c1.Close()
	testutil.WaitFor(t, 5*time.Second, "the first endpoint to be free", func() bool {
		for _, e := range p.l.Stats().Endpoints {
			if e.Active == 0 {
				return true
			}
		}
		return false
	})
	if got := readLine(t, p.dial(t)); got != first {
		t.Errorf("after %s freed up, the hash sent a new connection to %s", first, got)
	}
}

// TestPickHeldForConnectionLifetime: the endpoint's in-flight count is its
// open connections (what least_conn balances), and the client IP is the
// hash key.
func TestPickHeldForConnectionLifetime(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", balance.Config{Policy: balance.LeastConnName}, b.addr)
	keys := make(chan string, 8)
	up.onPick = func(info *balance.Info) {
		if info.HasKey {
			keys <- info.Key
		}
	}
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	ep := up.endpoint(t, b.addr)
	c1, c2 := p.dial(t), p.dial(t)
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")
	if n := ep.InFlight(); n != 2 {
		t.Fatalf("in-flight with two open connections = %d, want 2", n)
	}
	c1.Close()
	c2.Close()
	testutil.WaitFor(t, 5*time.Second, "in-flight to drop to 0", func() bool { return ep.InFlight() == 0 })
	if ep.Failures() != 0 {
		t.Errorf("endpoint failures = %d, want 0", ep.Failures())
	}
	if k := <-keys; k != "127.0.0.1" {
		t.Errorf("hash key %q, want the client IP 127.0.0.1", k)
	}
}

func TestManyConcurrentConnections(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := strings.Repeat(fmt.Sprint(i), 1000)
			if _, err := c.Write([]byte(msg)); err != nil {
				errs <- err
				return
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- err
				return
			}
			if string(got) != msg {
				errs <- fmt.Errorf("conn %d: echo differs", i)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestByteCountersMoveDuringConnection: a long connection's byte counters
// advance at the activity checks (from the kernel's counters), before it
// ends, and settle exactly when it does.
func TestByteCountersMoveDuringConnection(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: 400 * time.Millisecond}, up) // checks every 100ms
	c := p.dial(t)
	roundTrip(t, c, strings.Repeat("x", 1000))
	testutil.WaitFor(t, 5*time.Second, "downstream_rx and upstream_rx to reach 1000 while the connection is open", func() bool {
		return promValue(p, "app", b.addr, DirDownstreamRx) >= 1000 && promValue(p, "app", b.addr, DirUpstreamRx) >= 1000
	})
	if p.closed(CloseDone)+p.closed(CloseIdle) != 0 {
		t.Fatal("the connection ended before the counters moved; the test proves nothing")
	}
	roundTrip(t, c, "yy")
	c.Close()
	testutil.WaitFor(t, 5*time.Second, "the connection to end", func() bool { return p.closed(CloseDone) == 1 })
	for _, dir := range []string{DirDownstreamRx, DirUpstreamRx} {
		if got := promValue(p, "app", b.addr, dir); got != 1002 {
			t.Errorf("received bytes %s = %v at the end, want 1002", dir, got)
		}
	}
}

// TestHostNameEndpoint: an endpoint given by host name is resolved on
// each dial.
func TestHostNameEndpoint(t *testing.T) {
	b := startServer(t, echo)
	_, port, _ := net.SplitHostPort(b.addr)
	up := newUpstream(t, "app", rr(), net.JoinHostPort("localhost", port))
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	roundTrip(t, p.dial(t), "by name")
}
