package tcpproxy

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestKeepAliveOnlyWithoutIdleTimeout: both sockets of a connection (the
// client's accepted by a Listen listener, the endpoint's) have SO_KEEPALIVE
// only when no idle timeout guards them.
func TestKeepAliveOnlyWithoutIdleTimeout(t *testing.T) {
	b := startServer(t, echo)
	for _, tt := range []struct {
		idle time.Duration
		want int
	}{{0, 0}, {NoIdleTimeout, 1}} {
		p := startProxy(t, Config{Name: "t", Upstream: "app", IdleTimeout: tt.idle}, newUpstream(t, "app", rr(), b.addr))
		c := p.dial(t)
		roundTrip(t, c, "up")
		p.l.cmu.Lock()
		var socks []*net.TCPConn
		for cn := range p.l.conns {
			cn.mu.Lock()
			socks = append(socks, cn.client, cn.upstream)
			cn.mu.Unlock()
		}
		p.l.cmu.Unlock()
		if len(socks) != 2 {
			t.Fatalf("%d sockets tracked, want 2", len(socks))
		}
		for i, sock := range socks {
			rc, err := sock.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var got int
			var gerr error
			rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) })
			if gerr != nil {
				t.Fatal(gerr)
			}
			if got != tt.want {
				t.Errorf("idle_timeout %v: %s socket SO_KEEPALIVE = %d, want %d", tt.idle, []string{"client", "upstream"}[i], got, tt.want)
			}
		}
	}
}
