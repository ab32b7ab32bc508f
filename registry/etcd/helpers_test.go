package etcd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchboard-dev/switchboard/internal/testutil"
	"github.com/switchboard-dev/switchboard/registry"
)

// logRecorder is a slog.Handler that keeps every message, so that tests
// can wait for a logged event instead of sleeping.
type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// count is how many lines so far contain substr.
func (l *logRecorder) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// waitFor blocks until more than `after` lines contain substr.
func (l *logRecorder) waitFor(t *testing.T, substr string, after int, limit time.Duration) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if l.count(substr) > after {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no log line containing %q within %v; log:\n%s", substr, limit, strings.Join(l.lines, "\n"))
		}
	}
}

func newTestRegistry(t *testing.T, addr string, logs *logRecorder) *Registry {
	t.Helper()
	return newTestRegistryAt(t, addr, "/test", logs)
}

// newTestRegistryAt is newTestRegistry with the given key prefix.
func newTestRegistryAt(t *testing.T, addr, prefix string, logs *logRecorder) *Registry {
	t.Helper()
	var h slog.Handler = slog.NewTextHandler(io.Discard, nil)
	if logs != nil {
		h = logs
	}
	r, err := New(Config{
		Endpoints:      []string{addr},
		Prefix:         prefix,
		DialTimeout:    2 * time.Second,
		RequestTimeout: 2 * time.Second,
		Logger:         slog.New(h),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// rawClient is a plain etcd client for arranging and inspecting state
// behind the Registry's back.
func rawClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func inst(id string, port int, tags ...string) registry.Instance {
	return registry.Instance{ID: id, Service: "orders", Address: "10.0.0.1", Port: port, Tags: tags}
}

func reg(i registry.Instance, ttl time.Duration) registry.Registration {
	return registry.Registration{Instance: i, Check: registry.Check{TTL: ttl}}
}

func ids(in []registry.Instance) string {
	s := make([]string, len(in))
	for i, x := range in {
		s[i] = x.ID
	}
	return strings.Join(s, ",")
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nextUntil calls Next until a snapshot's IDs equal want (comma-joined,
// sorted), and fails after limit with every snapshot and error seen.
func nextUntil(t *testing.T, w registry.Watcher, want string, limit time.Duration) []registry.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var seen []string
	for {
		snap, err := w.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("watch did not yield [%s] within %v; saw %v", want, limit, seen)
			}
			seen = append(seen, "error: "+err.Error())
			// A watcher is called again after an error; a short pause
			// stands in for the caller's backoff.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		seen = append(seen, "["+ids(snap)+"]")
		if ids(snap) == want {
			return snap
		}
	}
}

func mustRegister(t *testing.T, r *Registry, rg registry.Registration) {
	t.Helper()
	if err := r.Register(ctxFor(t, 5*time.Second), rg); err != nil {
		t.Fatalf("Register(%s): %v", rg.Instance.ID, err)
	}
}

// cutProxy forwards TCP to an etcd and can cut the traffic off (closing
// every connection and refusing new ones) and heal it, to disconnect one
// client while others keep working.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func startEtcd(t *testing.T) *testutil.EtcdServer { return testutil.StartEtcd(t) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}
