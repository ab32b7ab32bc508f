package tcpproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// loopConn is what a test sees of a connection on the loop.
type loopConn struct {
	state        connState
	inPipe       [2]int
	pipeCap      [2]int
	dstFull      [2]bool
	read         [2]uint64
	clientQueued int // bytes in the client socket's receive queue
	hasPipe      [2]bool
	buffered     [2]int // bytes held in the loop's copy buffer
	hasBuf       [2]bool
	bulk         [2]bool
	opts         [2]bool // the client's and the endpoint's socket have socketOpts
	lingerOff    bool    // the client's socket has no SO_LINGER timeout
	preset       bool    // the loop relies on the listening socket's options
}

// loopState looks at p's loop connections (on their loops) and at the
// pipes the loops keep; p must run on the event loop.
func loopState(t *testing.T, p *proxy) (conns []loopConn, pooled []int) {
	t.Helper()
	lp := p.l.lp
	if lp == nil {
		t.Fatal("the listener is not on the event loop")
	}
	var mu sync.Mutex
	lp.onLoops(func(tl *tloop) {
		mu.Lock()
		defer mu.Unlock()
		for c := tl.conns; c != nil; c = c.next {
			lc := loopConn{state: c.state}
			for i := range c.dirs {
				d := &c.dirs[i]
				lc.inPipe[i], lc.dstFull[i], lc.read[i], lc.hasPipe[i] = d.inPipe, d.dstFull, d.n, d.hasPipe
				lc.buffered[i], lc.hasBuf[i], lc.bulk[i] = d.end-d.off, d.buf != nil, d.bulk
				if d.hasPipe {
					lc.pipeCap[i], _ = unix.FcntlInt(uintptr(d.p.W), unix.F_GETPIPE_SZ, 0)
				}
			}
			lc.clientQueued, _ = unix.IoctlGetInt(c.cfd, unix.SIOCINQ)
			lc.opts = [2]bool{allOn(c.cfd, socketOpts), c.ufd >= 0 && allOn(c.ufd, socketOpts)}
			lc.preset = tl.preset
			if lg, err := unix.GetsockoptLinger(c.cfd, unix.SOL_SOCKET, unix.SO_LINGER); err == nil {
				lc.lingerOff = lg.Onoff == 0
			}
			conns = append(conns, lc)
		}
		for _, pp := range tl.pipes.Kept() {
			n, err := unix.IoctlGetInt(pp.R, unix.SIOCINQ)
			if err != nil {
				t.Errorf("FIONREAD on a pooled pipe: %v", err)
			}
			pooled = append(pooled, n)
		}
	})
	return conns, pooled
}

// checkPooledPipesEmpty reports every pooled pipe (loopState's bytes in
// each) that holds bytes.
func checkPooledPipesEmpty(t *testing.T, pooled []int) {
	t.Helper()
	for i, n := range pooled {
		if n != 0 {
			t.Errorf("pooled pipe %d holds %d bytes, want every pooled pipe empty", i, n)
		}
	}
}

// TestLoopBackpressureHoldsAtMostAPipe: an endpoint that does not read
// stops the proxy reading its client: the loop holds at most one pipe's
// worth of the stream (the rest waits in the kernel's socket buffers, where
// TCP's flow control pushes back on the client), and once the endpoint
// reads, every byte arrives, in order.
func TestLoopBackpressureHoldsAtMostAPipe(t *testing.T) {
	release := make(chan struct{})
	got := make(chan [32]byte, 1)
	var received int64
	b := startServer(t, func(c *net.TCPConn) {
		<-release
		h := sha256.New()
		n, _ := io.Copy(h, c)
		received = n
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
	})
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), b.addr))
	c := p.dial(t)
	const size = 64 << 20
	want := sha256.New()
	written := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for n := 0; n < size; n += len(buf) {
			buf[0] = byte(n >> 18) // every chunk differs: order matters to the sum
			want.Write(buf)
			if _, err := c.Write(buf); err != nil {
				written <- err
				return
			}
		}
		written <- c.CloseWrite()
	}()
	var st loopConn
	testutil.WaitFor(t, 10*time.Second, "the loop to stop reading its client (endpoint full)", func() bool {
		conns, _ := loopState(t, p)
		if len(conns) != 1 {
			return false
		}
		st = conns[0]
		return st.dstFull[0] && st.clientQueued > 0
	})
	// What it holds is in its copy buffer or, the stream being bulk, in
	// its pipe: never both, and never more than the one holds.
	switch {
	case st.buffered[0] > 0 && st.inPipe[0] > 0:
		t.Errorf("the loop holds %d bytes in its buffer and %d in its pipe, want one or the other", st.buffered[0], st.inPipe[0])
	case st.buffered[0] > copyBufSize:
		t.Errorf("the loop holds %d bytes in its copy buffer, more than its %d", st.buffered[0], copyBufSize)
	case st.buffered[0] == 0 && (st.inPipe[0] <= 0 || st.inPipe[0] > st.pipeCap[0]):
		t.Errorf("the loop holds %d bytes of the stream in its pipe, want 1 to the pipe's capacity %d", st.inPipe[0], st.pipeCap[0])
	}
	// It stays stopped: what it read does not move while the endpoint
	// does not read, and the stream is far from all sent.
	again, _ := loopState(t, p)
	if len(again) != 1 || again[0].read[0] != st.read[0] {
		t.Errorf("the loop read on from its client while the endpoint was full: %+v then %+v", st, again)
	}
	if st.read[0] >= size/2 {
		t.Errorf("the loop read %d of the %d-byte stream before it stopped, want it held back", st.read[0], size)
	}
	close(release)
	select {
	case err := <-written:
		if err != nil {
			t.Fatalf("client write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client could not send the whole stream within 30s of the endpoint reading")
	}
	select {
	case sum := <-got:
		if received != size || !bytes.Equal(sum[:], want.Sum(nil)) {
			t.Fatalf("the endpoint received %d bytes (sum %x), want %d (sum %x)", received, sum, size, want.Sum(nil))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint did not see the stream's end within 30s")
	}
}

// TestResetPropagates: an endpoint that resets its connection mid-stream
// has the proxy reset the client's (not close it with a FIN, which would
// pass a cut stream for a complete one), on either engine; the cause is
// error.
func TestResetPropagates(t *testing.T) {
	b := startServer(t, func(c *net.TCPConn) {
		// Once the client is surely connected (it wrote): else the
		// reset may reach it while it still connects.
		if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
			return
		}
		c.Write([]byte("partial"))
		c.SetLinger(0)
		c.Close()
	})
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, newUpstream(t, "app", rr(), b.addr))
	c := p.dial(t)
	if _, err := c.Write([]byte("go")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read %q then %v, want a reset (ECONNRESET)", buf, err)
	}
	testutil.WaitFor(t, 5*time.Second, "closed{error} = 1", func() bool { return p.closed(CloseError) == 1 })
}

// TestLoopPipeWithBytesIsNotReused: a connection cut while its pipe holds
// bytes (its endpoint reset with the stream stuck) closes that pipe; the
// loop keeps only empty pipes, and the next connection sees only its own
// bytes.
func TestLoopPipeWithBytesIsNotReused(t *testing.T) {
	var once sync.Once
	kill := make(chan struct{})
	stuck := startServer(t, func(c *net.TCPConn) {
		<-kill // never reads: the stream sticks in the proxy's pipe
		c.SetLinger(0)
		c.Close()
	})
	t.Cleanup(func() { once.Do(func() { close(kill) }) })
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), stuck.addr))
	c := p.dial(t)
	go func() {
		buf := bytes.Repeat([]byte("stale"), 64<<10/5)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	testutil.WaitFor(t, 10*time.Second, "the stream to stick in the pipe", func() bool {
		conns, _ := loopState(t, p)
		return len(conns) == 1 && conns[0].dstFull[0] && conns[0].inPipe[0] > 0
	})
	once.Do(func() { close(kill) })
	testutil.WaitFor(t, 5*time.Second, "the connection to end with an error", func() bool { return p.closed(CloseError) == 1 })
	_, pooled := loopState(t, p)
	checkPooledPipesEmpty(t, pooled)

	// The next connections, to an echo endpoint, get their own bytes
	// only; they take their pipes from the pool (each message is bulk:
	// larger than the copy buffer).
	e := startServer(t, echo)
	p.ups[0].pool.Update([]endpoint.Spec{{Address: e.addr}})
	for i := range 3 {
		c2 := p.dial(t)
		msg := strings.Repeat("fresh", (256<<10)/5+i)
		roundTrip(t, c2, msg)
		c2.CloseWrite()
		c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, err := io.ReadAll(c2); err != nil || len(rest) != 0 {
			t.Fatalf("after its echo, connection %d read %q, %v; want nothing more and EOF", i, rest, err)
		}
	}
	_, pooled = loopState(t, p)
	if len(pooled) == 0 {
		t.Error("the loop keeps no pipe after connections that moved bytes, want it to pool them")
	}
	checkPooledPipesEmpty(t, pooled)
}

// TestServerMovesListenerToNewEngine: a reload that changes a tcp
// listener's engine (same address) keeps its socket: a connection
// established before goes on, on the old engine, and new connections are
// served by the new one; and back, from the loops' own descriptor of the
// socket (the loops close the listener the runtime's poller watched).
func TestServerMovesListenerToNewEngine(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	s := NewServer(func(string) Upstream { return up }, NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	spec := func(engine string) []Spec {
		return []Spec{{Listen: "127.0.0.1:0", Config: Config{Name: "t", Upstream: "app", Engine: engine}}}
	}
	ch, err := s.Prepare(spec(EngineGoroutine), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch.Commit()
	t.Cleanup(s.Shutdown)
	addr := s.Addr("t")
	old, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	roundTrip(t, old, "before")

	// Same name, same address as configured: kept, on another engine.
	s.mu.Lock()
	listen := s.listeners["t"].addr
	s.mu.Unlock()
	next := spec(EngineEventLoop)
	next[0].Listen = listen
	ch, err = s.Prepare(next, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch.Commit()
	if got := s.Addr("t"); got != addr {
		t.Fatalf("after the engine change the listener is at %s, want %s (the same socket)", got, addr)
	}
	s.mu.Lock()
	engine := s.listeners["t"].l.Engine()
	s.mu.Unlock()
	if engine != EngineEventLoop {
		t.Fatalf("engine after the change: %s, want eventloop", engine)
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	roundTrip(t, fresh, "after, on the loop")
	roundTrip(t, old, "the old connection goes on")
	s.mu.Lock()
	onLoops := s.listeners["t"].l
	s.mu.Unlock()
	onLoops.cmu.Lock()
	goLn := onLoops.ln
	onLoops.cmu.Unlock()
	if goLn != nil {
		t.Fatal("the loops serve the socket and the runtime's poller still watches it (Listener.ln is open)")
	}

	// And back: the goroutine engine gets the socket from the loops'
	// descriptor.
	back := spec(EngineGoroutine)
	back[0].Listen = listen
	ch, err = s.Prepare(back, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch.Commit()
	if got := s.Addr("t"); got != addr {
		t.Fatalf("after the change back the listener is at %s, want %s (the same socket)", got, addr)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	roundTrip(t, third, "back on goroutines")
	roundTrip(t, fresh, "the loop's connection goes on")
	roundTrip(t, old, "the first connection goes on")
}

// TestConfigEngine: an unknown engine, and the event loop with a feature
// it does not do, are errors naming the field; auto picks the loop only
// where it can.
func TestConfigEngine(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "t", Upstream: "a", Engine: "fast"}, `engine: unknown engine "fast"`},
		{Config{Name: "t", Upstream: "a", Engine: EngineEventLoop, SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}}, "engine: eventloop does not do sni"},
		{Config{Name: "t", Upstream: "a", Engine: EngineEventLoop, AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "engine: eventloop does not do accept_proxy_protocol"},
	} {
		err := tt.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "t", Upstream: "a"}, EngineEventLoop},
		{Config{Name: "t", Upstream: "a", Engine: EngineGoroutine}, EngineGoroutine},
		{Config{Name: "t", Upstream: "a", SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}}, EngineGoroutine},
		{Config{Name: "t", Upstream: "a", SendProxyProtocol: "v2"}, EngineEventLoop},
	} {
		if got := tt.cfg.EngineName(); got != tt.want {
			t.Errorf("EngineName of %+v = %s, want %s", tt.cfg, got, tt.want)
		}
	}
}

// TestLoopShutdownDrainsThenCuts: Shutdown on the loop lets an open
// connection go on while it drains, stops accepting, and cuts it at the
// deadline (closed{shutdown}, the pick Done).
func TestLoopShutdownDrainsThenCuts(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, up)
	c := p.dial(t)
	roundTrip(t, c, "before")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.l.Shutdown(ctx) }()
	testutil.WaitFor(t, 5*time.Second, "the listener to stop accepting", func() bool {
		nc, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			return true
		}
		nc.Close()
		return false
	})
	roundTrip(t, c, "during the drain")
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "1 connection(s) cut") {
			t.Fatalf("Shutdown = %v, want 1 connection cut", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return within 5s of its deadline")
	}
	expectClosed(t, c, 5*time.Second)
	if n := p.closed(CloseShutdown); n != 1 {
		t.Errorf("closed{shutdown} = %v, want 1", n)
	}
	if n := up.endpoint(t, b.addr).InFlight(); n != 0 {
		t.Errorf("in flight after the cut: %d, want 0", n)
	}
}

// TestLoopShutdownCountsACutHostNameDial: a connection whose dial of a
// host name (on a goroutine, off the loop) hangs is cut at the shutdown
// deadline and counted as cut: the canceled dial's report, which may reach
// the loop before the cut does, leaves the connection to the cut instead
// of ending it as a failed attempt first (which left it out of the count).
func TestLoopShutdownCountsACutHostNameDial(t *testing.T) {
	hole := blackhole(t)
	_, port, _ := net.SplitHostPort(hole)
	named := net.JoinHostPort("localhost", port)
	up := newUpstream(t, "app", rr(), named)
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop, ConnectTimeout: time.Minute}, up)
	c := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the connection to be admitted", func() bool { return p.l.Stats().Active == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := p.l.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 connection(s) cut") {
		t.Fatalf("Shutdown = %v, want the connecting one counted as cut", err)
	}
	expectClosed(t, c, 5*time.Second)
	if n := p.connectErrors("app", named); n != 0 {
		t.Errorf("connect errors = %v, want 0: a dial cut by shutdown says nothing about the endpoint", n)
	}
}

// TestLoopAcceptBacksOffWhenOutOfDescriptors: a loop whose accept fails
// (out of file descriptors) stops watching the listener for a while
// instead of spinning on it, says so in the log, and serves the waiting
// connections once descriptors are free again.
func TestLoopAcceptBacksOffWhenOutOfDescriptors(t *testing.T) {
	// The backend is short of descriptors too: unlike startServer's, its
	// accept loop retries.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				runtime.Gosched()
				continue
			}
			wg.Go(func() {
				defer c.Close()
				echo(c.(*net.TCPConn))
			})
		}
	})
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), ln.Addr().String()))
	roundTrip(t, p.dial(t), "warm") // the backend's and the proxy's first descriptors
	// Every descriptor left but one, which the client takes: the proxy
	// (in this process too) then cannot accept it.
	giveBack := testutil.TakeDescriptors(t)
	c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial with one descriptor left: %v", err)
	}
	defer c.Close()
	testutil.WaitFor(t, 5*time.Second, "the proxy to log that its accept failed", func() bool {
		return strings.Contains(p.logs.String(), "accept failed")
	})
	giveBack()
	// The client waits in the accept queue; once the loop resumes it is
	// served.
	roundTrip(t, c, "after the backoff")
}

// TestLoopLateHostDialNotTakenByNextConnection: a connection that ends
// while its dial of a host name still runs on its goroutine (its connect
// deadline on the loop fires a moment before the dialer's own, or the cut
// at the shutdown deadline ends it) leaves a late dial result behind. The
// loop reuses the ended connection's struct for the next connection; the
// late result must be thrown away, not taken as the next connection's
// upstream socket (its bytes would go to the old connection's endpoint,
// counted against the new one's). The test ends the first connection with
// the cut's cancel, which leaves its dial running, and lets that dial
// complete once the next connection dials a host name too.
func TestLoopLateHostDialNotTakenByNextConnection(t *testing.T) {
	t.Cleanup(func(n int) func() { return func() { runtime.GOMAXPROCS(n) } }(runtime.GOMAXPROCS(2))) // one loop: the next connection reuses the struct
	// First endpoint: a blackhole the test opens later by accepting the
	// connection that fills its queue.
	ln1, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln1.Close() })
	rc, err := ln1.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := listenBacklog0(rc); err != nil {
		t.Fatal(err)
	}
	filler, err := net.DialTimeout("tcp", ln1.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	port1 := ln1.Addr().(*net.TCPAddr).Port
	hole2 := blackhole(t)
	_, port2, _ := net.SplitHostPort(hole2)

	up := newUpstream(t, "app", rr(), "localhost:"+strconv.Itoa(port1))
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop, ConnectTimeout: 30 * time.Second, ConnectAttempts: 1}, up)
	connecting := func() int {
		conns, _ := loopState(t, p)
		n := 0
		for _, c := range conns {
			if c.state == stConnecting {
				n++
			}
		}
		return n
	}
	a := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the first connection to dial", func() bool { return connecting() == 1 })
	if n := p.l.lp.cutAll(); n != 1 {
		t.Fatalf("cutAll = %d, want 1", n)
	}
	expectClosed(t, a, 5*time.Second)

	up.pool.Update([]endpoint.Spec{{Address: "localhost:" + port2}})
	b := p.dial(t)
	testutil.WaitFor(t, 5*time.Second, "the next connection to dial", func() bool { return connecting() == 1 })
	if _, err := b.Write([]byte("for the second endpoint")); err != nil {
		t.Fatal(err)
	}
	// Open the first endpoint: the first connection's dial completes (at
	// its SYN's next retransmission) and its result reaches the loop.
	ln1.SetDeadline(time.Now().Add(20 * time.Second))
	if c, err := ln1.Accept(); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	late, err := ln1.Accept()
	if err != nil {
		t.Fatalf("the first connection's dial did not complete: %v", err)
	}
	defer late.Close()
	late.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 64)
	n, err := late.Read(got)
	if got = got[:n]; n > 0 || err != io.EOF {
		t.Fatalf("the first connection's late dial read %q, %v; want it closed at once (EOF) by the loop, not carrying the next connection's bytes", got, err)
	}
	if n := connecting(); n != 1 {
		t.Errorf("connections still dialing: %d, want the next one still dialing its own endpoint", n)
	}
	p.l.lp.cutAll() // the next connection's dial hangs: end it now, not at the shutdown deadline
}

// TestZonedEndpointIsProxied: an endpoint written with an IPv6 zone
// ("[::1%lo]:port") is dialed with its zone (off the loop on the event
// loop, whose own dial takes none) and proxied, on both engines.
func TestZonedEndpointIsProxied(t *testing.T) {
	ln, err := net.ListenTCP("tcp6", &net.TCPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatalf("IPv6 loopback: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()
	zoned := fmt.Sprintf("[::1%%lo]:%d", ln.Addr().(*net.TCPAddr).Port)
	for _, engine := range []string{EngineEventLoop, EngineGoroutine} {
		t.Run(engine, func(t *testing.T) {
			p := startProxy(t, Config{Name: "z", Upstream: "app", Engine: engine}, newUpstream(t, "app", rr(), zoned))
			c := p.dial(t)
			defer c.Close()
			roundTrip(t, c, "through a zoned address")
		})
	}
}

// TestLoopCopiesSmallExchangesAndSplicesBulk: a connection that trades
// small messages moves them through the loop's copy buffer and takes no
// pipe (a pipe's splices cost more than a read and a write for a few
// bytes); once a read fills the buffer the direction is bulk and its bytes
// go through a pipe, given back to the pool when they are out; an idle
// connection holds neither.
func TestLoopCopiesSmallExchangesAndSplicesBulk(t *testing.T) {
	e := startServer(t, echo)
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), e.addr))
	c := p.dial(t)
	for i := range 20 {
		roundTrip(t, c, strings.Repeat("s", 100+i))
	}
	conns, pooled := loopState(t, p)
	if len(conns) != 1 {
		t.Fatalf("%d connections on the loops, want 1", len(conns))
	}
	st := conns[0]
	if st.read != [2]uint64{2190, 2190} {
		t.Errorf("the loop read %v bytes each way, want 2190 each", st.read)
	}
	if st.bulk != [2]bool{} || st.hasPipe != [2]bool{} || st.hasBuf != [2]bool{} || len(pooled) != 0 {
		t.Fatalf("after small exchanges: bulk %v, pipes held %v, buffers held %v, pipes made %d; want no direction bulk and no pipe or buffer ever taken or held",
			st.bulk, st.hasPipe, st.hasBuf, len(pooled))
	}

	roundTrip(t, c, strings.Repeat("b", 1<<20))
	conns, pooled = loopState(t, p)
	if len(conns) != 1 {
		t.Fatalf("%d connections on the loops, want 1", len(conns))
	}
	st = conns[0]
	if st.bulk != [2]bool{true, true} || st.hasPipe != [2]bool{} || st.hasBuf != [2]bool{} {
		t.Errorf("after a 1 MiB echo: bulk %v, pipes held %v, buffers held %v; want both directions bulk, holding nothing", st.bulk, st.hasPipe, st.hasBuf)
	}
	if len(pooled) == 0 {
		t.Error("after a 1 MiB echo the loop pools no pipe, want the bulk's pipes given back")
	}
	checkPooledPipesEmpty(t, pooled)
}

// TestLoopPassesTheEndAfterAShortMessage: a client that writes a few
// bytes and its end at once (both often reach the proxy before it reads,
// told in one event) has both passed on: the short read of the bytes does
// not make the loop wait for news of the end, which has come already.
func TestLoopPassesTheEndAfterAShortMessage(t *testing.T) {
	// The endpoint reads to the end and answers with what it read.
	b := startServer(t, func(c *net.TCPConn) {
		got, err := io.ReadAll(c)
		if err != nil {
			return
		}
		c.Write(append([]byte("got:"), got...))
		c.CloseWrite()
	})
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), b.addr))
	for i := range 200 {
		c := p.dial(t)
		msg := "m" + strconv.Itoa(i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "got:"+msg {
			t.Fatalf("connection %d: read %q, %v; want %q and the end", i, got, err, "got:"+msg)
		}
		c.Close()
	}
}

// TestLoopSocketsHaveNoDelayAndUrgentInline: both sockets of a connection
// on the loops have TCP_NODELAY and SO_OOBINLINE, the client's copied from
// the listening socket (no setsockopt per connection).
func TestLoopSocketsHaveNoDelayAndUrgentInline(t *testing.T) {
	b := startServer(t, echo)
	p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), b.addr))
	for i := range 3 {
		c := p.dial(t)
		defer c.Close()
		roundTrip(t, c, fmt.Sprintf("conn %d", i))
	}
	conns, _ := loopState(t, p)
	if len(conns) != 3 {
		t.Fatalf("%d connections on the loops, want 3", len(conns))
	}
	for i, c := range conns {
		if !c.opts[0] || !c.opts[1] {
			t.Errorf("connection %d: client socket has the options: %v, endpoint socket: %v; want both", i, c.opts[0], c.opts[1])
		}
		if !c.preset {
			t.Errorf("connection %d: its loop sets the options on each client socket; Linux copies them from the listening socket", i)
		}
	}
}

// TestDupListenerLeavesTheSocketNonBlocking: the listener an engine
// change makes on a goroutine-engine listener's socket (dupListener)
// never puts the socket, which both share, in blocking mode, not even for
// a moment. net.FileListener of ln.File's file did (os.File.Fd sets
// blocking mode on the file description, then net set non-blocking mode
// again on its own duplicate): an AcceptTCP of the running listener that
// started in between blocked in the kernel until the next connection
// came, and its Shutdown's ln.Close waited for it, maybe for ever. A
// goroutine reads the socket's flags while the listeners are made.
func TestDupListenerLeavesTheSocketNonBlocking(t *testing.T) {
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var looks atomic.Int64
	blocking := make(chan struct{}, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for !stop.Load() {
			rc.Control(func(fd uintptr) {
				if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil && fl&unix.O_NONBLOCK == 0 {
					select {
					case blocking <- struct{}{}:
					default:
					}
				}
			})
			looks.Add(1)
		}
	}()
	// Until the watcher has looked a good many times while listeners
	// were made (it may wait for a processor on a loaded machine).
	made := 0
	for made < 2000 || looks.Load() < 2000 {
		nl, err := dupListener(ln)
		if err != nil {
			t.Fatal(err)
		}
		nl.Close()
		made++
		if made > 200000 {
			break
		}
	}
	stop.Store(true)
	<-watched
	select {
	case <-blocking:
		t.Fatalf("the listening socket was in blocking mode while dupListener ran (%d listeners made, %d looks)", made, looks.Load())
	default:
	}
	if looks.Load() < 2000 {
		t.Fatalf("the watcher looked at the socket's flags %d times, want at least 2000", looks.Load())
	}
}

// TestLoopTurnsOffAListenersLingerOnItsConnections: accepted sockets
// inherit the listening socket's SO_LINGER, and a loop's close of a
// socket with a linger timeout would wait (up to it, the loop stalled);
// a listener of the caller's with one (here from net.ListenConfig, so
// without the preset options either) has its connections' linger turned
// off, and they get TCP_NODELAY and SO_OOBINLINE all the same.
func TestLoopTurnsOffAListenersLingerOnItsConnections(t *testing.T) {
	b := startServer(t, echo)
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			serr = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 5})
		})
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := startProxyOn(t, ln.(*net.TCPListener), Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), b.addr))
	c := p.dial(t)
	defer c.Close()
	roundTrip(t, c, "lingering listener")
	conns, _ := loopState(t, p)
	if len(conns) != 1 {
		t.Fatalf("%d connections on the loops, want 1", len(conns))
	}
	if !conns[0].lingerOff {
		t.Error("the client socket kept the listener's linger timeout: the loop's close of it would wait")
	}
	if !conns[0].opts[0] || !conns[0].opts[1] {
		t.Errorf("options on the client socket: %v, on the endpoint's: %v; want both", conns[0].opts[0], conns[0].opts[1])
	}
}
