package tcpproxy

import (
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		got := keepAlives(t, p)
		if len(got) != 2 {
			t.Fatalf("%d sockets tracked, want 2", len(got))
		}
		for i, v := range got {
			if v != tt.want {
				t.Errorf("idle_timeout %v: %s socket SO_KEEPALIVE = %d, want %d", tt.idle, []string{"client", "upstream"}[i], v, tt.want)
			}
		}
	}
}

// keepAlives is SO_KEEPALIVE of the client and the upstream socket of
// every connection p forwards, on either engine.
func keepAlives(t *testing.T, p *proxy) []int {
	t.Helper()
	var out []int
	get := func(fd int) {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		if err != nil {
			t.Error(err)
		}
		out = append(out, v)
	}
	if lp := p.l.lp; lp != nil {
		var mu sync.Mutex
		lp.onLoops(func(tl *tloop) {
			mu.Lock()
			defer mu.Unlock()
			for c := tl.conns; c != nil; c = c.next {
				if c.state == stForwarding {
					get(c.cfd)
					get(c.ufd)
				}
			}
		})
		return out
	}
	p.l.cmu.Lock()
	var socks []*net.TCPConn
	for cn := range p.l.conns {
		cn.mu.Lock()
		socks = append(socks, cn.client, cn.upstream)
		cn.mu.Unlock()
	}
	p.l.cmu.Unlock()
	for _, sock := range socks {
		rc, err := sock.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { get(int(fd)) })
	}
	return out
}
