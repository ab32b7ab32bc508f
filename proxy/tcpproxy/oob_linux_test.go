package tcpproxy

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// urgentStream writes size bytes on c, then "X" as TCP urgent
// (out-of-band) data, then "def", and returns what it wrote. It reports a
// failure with t.Errorf: an endpoint's goroutine calls it too.
func urgentStream(t *testing.T, c *net.TCPConn, size int) string {
	head := make([]byte, size)
	for k := range head {
		head[k] = 'a' + byte(k%26)
	}
	want := string(head) + "Xdef"
	if _, err := c.Write(head); err != nil {
		t.Errorf("write: %v", err)
		return want
	}
	rc, err := c.SyscallConn()
	if err != nil {
		t.Errorf("SyscallConn: %v", err)
		return want
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), []byte("X"), unix.MSG_OOB, nil)
		return serr != unix.EAGAIN
	}); err != nil || serr != nil {
		t.Errorf("send urgent: %v %v", err, serr)
		return want
	}
	if _, err := c.Write([]byte("def")); err != nil {
		t.Errorf("write: %v", err)
	}
	return want
}

func tail(b []byte) string {
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	return string(b)
}

// TestUrgentDataIsForwardedInOrder: a byte the client sends as TCP urgent
// data reaches the endpoint in its place in the stream (inline), and the
// bytes after it are neither lost nor cut off by a reset, whether the
// direction is copied (a few bytes) or spliced (bulk), on either engine.
func TestUrgentDataIsForwardedInOrder(t *testing.T) {
	for _, size := range []int{3, 64 << 10} {
		b := startServer(t, echo)
		p := startProxy(t, Config{Name: "t", Upstream: "app"}, newUpstream(t, "app", rr(), b.addr))
		for i := range 5 {
			c := p.dial(t)
			want := urgentStream(t, c, size)
			c.CloseWrite()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil || string(got) != want {
				t.Fatalf("size %d, connection %d: read %d bytes (tail %q), %v; want %d bytes ending %q", size, i, len(got), tail(got), err, len(want), "Xdef")
			}
			c.Close()
		}
	}
}

// TestLoopUrgentDataDoesNotWaitForTheEnd: on the event loop the bytes
// after an urgent mark go on at once, not when more bytes or the client's
// end come (a read stops short at the mark, a splice stops there: EPOLLPRI
// says why). The goroutine engine's splice waits there for the end (see
// docs/tcp.md).
func TestLoopUrgentDataDoesNotWaitForTheEnd(t *testing.T) {
	for _, size := range []int{3, 64 << 10} {
		b := startServer(t, echo)
		p := startProxy(t, Config{Name: "t", Upstream: "app", Engine: EngineEventLoop}, newUpstream(t, "app", rr(), b.addr))
		for i := range 5 {
			c := p.dial(t)
			want := urgentStream(t, c, size)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			echoed := make([]byte, len(want))
			if n, err := io.ReadFull(c, echoed); err != nil || string(echoed) != want {
				t.Fatalf("size %d, connection %d: echo before the end: %d bytes (tail %q), %v; want %d bytes ending %q", size, i, n, tail(echoed[:n]), err, len(want), "Xdef")
			}
			c.Close()
		}
	}
}

// TestEndpointUrgentDataIsForwardedInOrder: urgent data the endpoint sends
// reaches the client in its place too.
func TestEndpointUrgentDataIsForwardedInOrder(t *testing.T) {
	for _, size := range []int{3, 64 << 10} {
		b := startServer(t, func(c *net.TCPConn) {
			urgentStream(t, c, size)
			c.CloseWrite()
			io.Copy(io.Discard, c)
		})
		p := startProxy(t, Config{Name: "t", Upstream: "app"}, newUpstream(t, "app", rr(), b.addr))
		for i := range 5 {
			c := p.dial(t)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil || len(got) != size+4 || string(got[size:]) != "Xdef" {
				t.Fatalf("size %d, connection %d: read %d bytes (tail %q), %v; want %d bytes ending %q", size, i, len(got), tail(got), err, size+4, "Xdef")
			}
			c.Close()
		}
	}
}
