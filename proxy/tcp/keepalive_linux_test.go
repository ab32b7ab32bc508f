package tcpproxy

import (
	"syscall"
	"testing"
	"time"
)

// TestUpstreamKeepAliveOnlyWithoutIdleTimeout: the connection to the
// endpoint has SO_KEEPALIVE only when no idle timeout guards it.
func TestUpstreamKeepAliveOnlyWithoutIdleTimeout(t *testing.T) {
	b := startServer(t, echo)
	for _, tt := range []struct {
		idle time.Duration
		want int
	}{{0, 0}, {NoIdleTimeout, 1}} {
		p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: tt.idle}, newUpstream(t, "app", rr(), b.addr))
		c := p.dial(t)
		roundTrip(t, c, "up")
		p.l.cmu.Lock()
		var got int
		var gerr error
		for cn := range p.l.conns {
			cn.mu.Lock()
			up := cn.upstream
			cn.mu.Unlock()
			rc, err := up.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) })
		}
		p.l.cmu.Unlock()
		if gerr != nil {
			t.Fatal(gerr)
		}
		if got != tt.want {
			t.Errorf("idle_timeout %v: upstream SO_KEEPALIVE = %d, want %d", tt.idle, got, tt.want)
		}
	}
}
