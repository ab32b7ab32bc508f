package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
)

// TestKilledUpstreamInvisibleToNewConnections: clients open connections in
// a loop while one of three backends dies (its listener and connections
// closed). Every connection opened after the kill reaches a survivor:
// connect failures are retried on the next endpoint, and passive health
// ejects the dead one after a few.
func TestKilledUpstreamInvisibleToNewConnections(t *testing.T) {
	const (
		total   = 2000
		killAt  = 500
		workers = 4
		budget  = 5 * time.Second
	)
	backends := []*server{startServer(t, echo), startServer(t, echo), startServer(t, echo)}
	addrs := []string{backends[0].addr, backends[1].addr, backends[2].addr}
	up := newUpstream(t, "app", rr(), addrs...)
	det, err := health.NewDetector(health.PassiveConfig{ConsecutiveFailures: 3},
		health.WithDetectorOnChange(health.ApplyTo(up.pool)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.pool.Subscribe(func(s *endpoint.Set) { det.Update(s.All) }))
	for _, ep := range up.pool.Snapshot().All {
		ep.SetObserver(det)
	}
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	dead := up.endpoint(t, backends[1].addr)

	var (
		next     atomic.Int64
		killed   atomic.Int64 // UnixNano when the kill completed, 0 before
		killOnce sync.Once
		mu       sync.Mutex
		lateErrs []string // failures of connections opened after the kill
		earlyErr int      // failures of connections in flight at the kill
	)
	deadline := time.Now().Add(budget)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 8)
			for time.Now().Before(deadline) {
				i := next.Add(1)
				if i > total {
					return
				}
				if i == killAt {
					killOnce.Do(func() {
						backends[1].kill()
						killed.Store(time.Now().UnixNano())
					})
				}
				start := time.Now().UnixNano()
				err := func() error {
					c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(5 * time.Second))
					msg := fmt.Sprintf("%08d", i)
					if _, err := c.Write([]byte(msg)); err != nil {
						return err
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						return err
					}
					if string(buf) != msg {
						return fmt.Errorf("echo %q, want %q", buf, msg)
					}
					return nil
				}()
				if err != nil {
					mu.Lock()
					if k := killed.Load(); k != 0 && start > k {
						lateErrs = append(lateErrs, fmt.Sprintf("conn %d: %v", i, err))
					} else {
						earlyErr++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	done := min(next.Load(), total)
	if done < total {
		t.Errorf("only %d of %d connections within %v", done, total, budget)
	}
	if killed.Load() == 0 {
		t.Fatal("the loop ended before the kill")
	}
	if len(lateErrs) > 0 {
		t.Errorf("%d connection(s) opened after the kill failed, want 0; first: %s", len(lateErrs), lateErrs[0])
	}
	if earlyErr > workers {
		t.Errorf("%d connections failed around the kill; at most %d (one in flight per worker) may be cut", earlyErr, workers)
	}
	if n := p.rejected(RejectConnect); n != 0 {
		t.Errorf("rejected{connect_failed} = %v, want 0", n)
	}
	if st := dead.Status(); st.State != endpoint.Ejected {
		t.Errorf("dead endpoint is %v (%s), want ejected", st.State, st.Reason)
	}
	if n := p.connectErrors("app", backends[1].addr); n < 1 || n > 10 {
		t.Errorf("connect errors to the dead endpoint = %v, want a few (until ejection)", n)
	}
	t.Logf("%d connections, %d cut in flight at the kill, %v connect errors before ejection (%s)",
		done, earlyErr, p.connectErrors("app", backends[1].addr), dead.Status().Reason)
}
