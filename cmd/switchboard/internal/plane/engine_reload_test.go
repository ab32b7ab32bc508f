//go:build linux

package plane_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/config"
)

// withEngine names the engine of listener web of a configuration from
// upstreamYAML (SWITCHBOARD_TEST_ENGINE leaves it alone).
func withEngine(yaml, engine string) string {
	return strings.Replace(yaml, "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    engine: "+engine+"\n", 1)
}

// holdBackend is a backend that keeps each request carrying X-Hold: id
// until the test lets id go, so that a reload happens with requests in
// flight.
type holdBackend struct {
	*backend
	arrived map[string]chan struct{} // one value per request held under id
	release map[string]chan struct{}
	once    map[string]*sync.Once
}

func newHoldBackend(t *testing.T, ids ...string) *holdBackend {
	t.Helper()
	hb := &holdBackend{arrived: map[string]chan struct{}{}, release: map[string]chan struct{}{}, once: map[string]*sync.Once{}}
	for _, id := range ids {
		hb.arrived[id] = make(chan struct{}, 16)
		hb.release[id] = make(chan struct{})
		hb.once[id] = new(sync.Once)
	}
	hb.backend = newBackend(t, "be", func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Hold"); id != "" {
			hb.arrived[id] <- struct{}{}
			select {
			case <-hb.release[id]:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok "+r.URL.Path)
	})
	// Before the backend closes (cleanups run last first): a failed test
	// leaves no handler waiting.
	t.Cleanup(func() {
		for _, id := range ids {
			hb.let(id)
		}
	})
	return hb
}

// let lets the requests held under id go.
func (hb *holdBackend) let(id string) { hb.once[id].Do(func() { close(hb.release[id]) }) }

// waitHeld waits until n requests are held under id; failed says what
// else went wrong meanwhile.
func (hb *holdBackend) waitHeld(t *testing.T, id string, n int, failed func() string) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-hb.arrived[id]:
		case <-timer.C:
			t.Fatalf("%d of %d requests held under %q reached the backend; %s", i, n, id, failed())
		}
	}
}

// probeConn is a client connection the test reads and writes by hand, to
// see exactly which connection is served and when it closes.
type probeConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialProbe(t *testing.T, addr string) *probeConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &probeConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes a keep-alive GET of path, held at the backend under hold
// unless it is "".
func (rc *probeConn) send(path, hold string) {
	rc.t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
	if hold != "" {
		req += "X-Hold: " + hold + "\r\n"
	}
	if _, err := io.WriteString(rc.c, req+"\r\n"); err != nil {
		rc.t.Fatalf("write GET %s: %v", path, err)
	}
}

// answer reads the response to the request sent last and checks it is
// the backend's 200; it returns whether the proxy said it closes the
// connection after it.
func (rc *probeConn) answer(path string) (closing bool) {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "ok "+path {
		rc.t.Fatalf("GET %s: %d %q (%v), want 200 %q", path, resp.StatusCode, body, err, "ok "+path)
	}
	return resp.Close
}

// get sends a GET of path and checks its answer, on a connection kept
// alive.
func (rc *probeConn) get(path string) {
	rc.t.Helper()
	rc.send(path, "")
	if rc.answer(path) {
		rc.t.Fatalf("GET %s: the proxy closes the connection; want it kept alive", path)
	}
}

// closedByProxy checks that the proxy closes the connection (with a FIN,
// nothing more sent) without the client asking anything.
func (rc *probeConn) closedByProxy(what string) {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := rc.br.ReadByte()
	if err == nil {
		rc.t.Fatalf("%s: the proxy sent %q; want the connection closed", what, b)
	}
	if !errors.Is(err, io.EOF) {
		rc.t.Fatalf("%s: %v; want the connection closed (EOF), not reset or left open", what, err)
	}
}

// closedNow reports whether the proxy has closed the connection, without
// waiting: what it sent is read and dropped, then the socket has its
// end (or a reset), or nothing yet (still open).
func (rc *probeConn) closedNow() bool {
	rc.t.Helper()
	if rc.br.Buffered() > 0 {
		rc.br.Discard(rc.br.Buffered())
	}
	raw, err := rc.c.(*net.TCPConn).SyscallConn()
	if err != nil {
		rc.t.Fatal(err)
	}
	closed := false
	buf := make([]byte, 4096)
	raw.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true // still open
			case err != nil || n == 0:
				closed = true
				return true
			}
		}
	})
	return closed
}

// TestListenerEngineChangesOnReloadWithoutDroppingARequest reloads a
// listener from engine: goroutine to eventloop and back, twice, while
// four keep-alive clients send a steady stream of GETs. Every reload
// happens with a request of each client in flight, and every one of
// the 320 requests gets its 200: the socket stays open, in-flight
// requests finish, and each client sends all its requests on the one
// connection it opened first — the goroutine engine's keep-alive
// connections are served on across both switches.
//
// Which engine serves a new connection is seen by what only the event
// loops do to their connections when they stop: a connection opened
// after a reload to eventloop is closed by the next reload (its idle
// ones at once, one with a request in flight right after that
// request's 200, which says Connection: close); a connection opened
// after a reload to goroutine is served on across the next switch to
// eventloop and the following one back. The admin view's engine field
// follows each reload.
func TestListenerEngineChangesOnReloadWithoutDroppingARequest(t *testing.T) {
	const (
		clients   = 4
		perClient = 80
	)
	steps := []string{config.EngineEventLoop, config.EngineGoroutine, config.EngineEventLoop, config.EngineGoroutine}
	// Each client's requests holdAt[i] are held under "r<i>" until
	// reload i is done.
	holdAt := map[int]int{16: 0, 32: 1, 48: 2, 64: 3}
	ids := []string{"p1", "p3"} // a loop connection's request in flight at reload 1 and 3
	for i := range steps {
		ids = append(ids, fmt.Sprintf("r%d", i))
	}
	be := newHoldBackend(t, ids...)
	yaml := upstreamYAML("", be.addr())
	p := startProxy(t, withEngine(yaml, config.EngineGoroutine))
	addr := p.srv.Addr("web")
	engineNow := func() string {
		for _, lv := range p.srv.Listeners() {
			if lv.Name == "web" {
				return lv.Engine
			}
		}
		return ""
	}
	if e := engineNow(); e != config.EngineGoroutine {
		t.Fatalf("listener web runs on %q before any reload; want goroutine", e)
	}

	var (
		mu     sync.Mutex
		errs   []string
		served atomic.Int64
		dials  [clients]atomic.Int64
		wg     sync.WaitGroup
	)
	failed := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d requests answered; client errors: %v", served.Load(), errs)
	}
	for n := 0; n < clients; n++ {
		d := &net.Dialer{}
		tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			dials[n].Add(1)
			return d.DialContext(ctx, network, a)
		}}
		t.Cleanup(tr.CloseIdleConnections)
		c := &http.Client{Transport: tr, Timeout: time.Minute}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < perClient; k++ {
				path := fmt.Sprintf("/s/%d/%d", n, k)
				req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
				if i, ok := holdAt[k]; ok {
					req.Header.Set("X-Hold", fmt.Sprintf("r%d", i))
				}
				resp, err := c.Do(req)
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && (resp.StatusCode != 200 || string(body) != "ok "+path) {
						err = fmt.Errorf("%d %q", resp.StatusCode, body)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("client %d, GET %s: %v", n, path, err))
					mu.Unlock()
					return
				}
				served.Add(1)
			}
		}()
	}

	reload := func(engine string) {
		t.Helper()
		cfg, err := config.Parse("reload.yaml", []byte(withEngine(yaml, engine)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatalf("reload to engine %s: %v", engine, err)
		}
	}

	// A connection of the goroutine engine before any reload.
	onGoroutine := []*probeConn{dialProbe(t, addr)}
	onGoroutine[0].get("/g0")
	var idleOnLoop, busyOnLoop *probeConn
	for i, to := range steps {
		from := config.EngineGoroutine
		if i > 0 {
			from = steps[i-1]
		}
		if from == config.EngineEventLoop {
			busyOnLoop.send("/busy", fmt.Sprintf("p%d", i))
			be.waitHeld(t, fmt.Sprintf("p%d", i), 1, failed)
		}
		be.waitHeld(t, fmt.Sprintf("r%d", i), clients, failed)
		reload(to)
		if e := engineNow(); e != to {
			t.Fatalf("reload %d: listener web runs on %q; want %s", i, e, to)
		}
		be.let(fmt.Sprintf("r%d", i))
		if from == config.EngineEventLoop {
			// The loops' drain closes their idle connection at once and
			// lets the busy one finish its request, then closes it.
			idleOnLoop.closedByProxy(fmt.Sprintf("reload %d: an idle connection opened on the event loops", i))
			be.let(fmt.Sprintf("p%d", i))
			if !busyOnLoop.answer("/busy") {
				t.Errorf("reload %d: the request in flight on the draining event loops was answered without Connection: close", i)
			}
			busyOnLoop.closedByProxy(fmt.Sprintf("reload %d: a connection of the event loops after its request in flight", i))
		}
		// The goroutine engine's connections are served on, whatever
		// the engine now.
		for j, rc := range onGoroutine {
			rc.get(fmt.Sprintf("/g%d/after-reload-%d", j, i))
		}
		// New connections reach the new engine.
		if to == config.EngineEventLoop {
			idleOnLoop, busyOnLoop = dialProbe(t, addr), dialProbe(t, addr)
			idleOnLoop.get(fmt.Sprintf("/loop-idle-%d", i))
			busyOnLoop.get(fmt.Sprintf("/loop-busy-%d", i))
		} else {
			rc := dialProbe(t, addr)
			rc.get(fmt.Sprintf("/g-after-reload-%d", i))
			onGoroutine = append(onGoroutine, rc)
		}
	}
	wg.Wait()
	if len(errs) > 0 || served.Load() != clients*perClient {
		t.Fatalf("the stream across the reloads: %s; want all %d answered 200", failed(), clients*perClient)
	}
	for n := range dials {
		if d := dials[n].Load(); d != 1 {
			t.Errorf("client %d connected %d times; want 1 (its goroutine-engine connection served across every reload)", n, d)
		}
	}
}

// TestEngineReloadsDuringDrainsAndShutdownWaitsForThem: a listener is
// moved off the event loops while a request is in flight on them, back
// on and off again while that drain still runs, and on once more. Each
// drain lets its request finish (200, then the connection closes), the
// loops started meanwhile serve, and Shutdown returns only once every
// drain has ended: the request still held on the first loops is cut when
// its drain's shutdown_timeout ends, before Shutdown returns.
func TestEngineReloadsDuringDrainsAndShutdownWaitsForThem(t *testing.T) {
	be := newHoldBackend(t, "a", "b")
	// Long enough that the first drain is still running when Shutdown
	// starts, even on a loaded -race run.
	yaml := "shutdown_timeout: 5s\n" + upstreamYAML("", be.addr())
	p := startProxy(t, withEngine(yaml, config.EngineEventLoop))
	addr := p.srv.Addr("web")
	reload := func(engine string) {
		t.Helper()
		cfg, err := config.Parse("reload.yaml", []byte(withEngine(yaml, engine)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Apply(cfg); err != nil {
			t.Fatalf("reload to engine %s: %v", engine, err)
		}
	}
	failed := func() string { return "" }

	first := dialProbe(t, addr)
	first.get("/first")
	first.send("/held-a", "a")
	be.waitHeld(t, "a", 1, failed)
	reload(config.EngineGoroutine) // the first loops drain, "a" in flight

	reload(config.EngineEventLoop)
	second := dialProbe(t, addr)
	second.get("/second")
	second.send("/held-b", "b")
	be.waitHeld(t, "b", 1, failed)
	reload(config.EngineGoroutine) // two drains now
	reload(config.EngineEventLoop)
	third := dialProbe(t, addr)
	third.get("/third")

	be.let("b")
	if !second.answer("/held-b") {
		t.Error("the request in flight on the second loops' drain was answered without Connection: close")
	}
	second.closedByProxy("the second loops' connection after its request in flight")
	third.get("/third-again") // the loops now serving are untouched by the drains
	if first.closedNow() {
		t.Fatal("the first loops' connection closed while its request was held and its drain had time left")
	}

	p.srv.Shutdown()
	if !first.closedNow() {
		t.Error("Shutdown returned while the first loops' drain still held a connection open")
	}
	if !third.closedNow() {
		t.Error("Shutdown returned with the current loops' idle connection open")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the socket still accepts after Shutdown")
	}
}

// TestRemovedEventLoopListenerRefusesAtOnce: once a reload that removes
// a listener on the event loops returns, its port refuses connections
// (the loops' duplicate of the socket is closed too), while the
// connection it served drains.
func TestRemovedEventLoopListenerRefusesAtOnce(t *testing.T) {
	be := newHoldBackend(t, "a")
	yaml := upstreamYAML("", be.addr())
	p := startProxy(t, withEngine(yaml, config.EngineEventLoop))
	addr := p.srv.Addr("web")
	old := dialProbe(t, addr)
	old.get("/old")
	old.send("/held", "a")
	be.waitHeld(t, "a", 1, func() string { return "" })
	cfg, err := config.Parse("reload.yaml", []byte(strings.Replace(yaml, "name: web\n", "name: other\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s accepted a connection after its listener was removed", addr)
	}
	be.let("a")
	if !old.answer("/held") {
		t.Error("the request in flight on the removed listener was answered without Connection: close")
	}
	old.closedByProxy("the removed listener's connection after its request in flight")
}

// TestDrainingEventLoopHandsOverAFirstRequestToTheGoroutineEngine: a
// connection the loops accepted before its listener was removed, whose
// first request comes during the drain and is one the loops hand to the
// goroutine engine (a body over 64 KiB), is answered: the handover still
// reaches the listener's server, which drains after the loops.
func TestDrainingEventLoopHandsOverAFirstRequestToTheGoroutineEngine(t *testing.T) {
	be := newHoldBackend(t, "a")
	yaml := "shutdown_timeout: 10s\n" + upstreamYAML("", be.addr())
	p := startProxy(t, withEngine(yaml, config.EngineEventLoop))
	addr := p.srv.Addr("web")
	old := dialProbe(t, addr)
	old.get("/old")
	old.send("/held", "a") // keeps the loops draining
	be.waitHeld(t, "a", 1, func() string { return "" })
	fresh := dialProbe(t, addr)
	// The listening queue is first in, first out: once a connection
	// dialed after fresh is served, a loop has taken fresh.
	dialProbe(t, addr).get("/after-fresh")

	cfg, err := config.Parse("reload.yaml", []byte(strings.Replace(yaml, "name: web\n", "name: other\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	const size = 70 << 10
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(fresh.c, fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("b", size)))
		sent <- err
	}()
	fresh.answer("/upload")
	if err := <-sent; err != nil {
		t.Fatalf("sending the upload: %v", err)
	}
	be.let("a")
	if !old.answer("/held") {
		t.Error("the request in flight on the removed listener was answered without Connection: close")
	}
}
