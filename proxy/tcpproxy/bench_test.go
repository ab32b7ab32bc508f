package tcpproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkConnect measures one proxied connection end to end: connect,
// 8-byte echo, close (compare BenchmarkConnectDirect).
func BenchmarkConnect(b *testing.B) {
	be := startServer(b, echo)
	p := startProxy(b, Config{Name: "b", Upstream: "app"}, newUpstream(b, "app", rr(), be.addr))
	benchConnect(b, p.addr)
}

func BenchmarkConnectDirect(b *testing.B) {
	be := startServer(b, echo)
	benchConnect(b, be.addr)
}

func benchConnect(b *testing.B, addr string) {
	msg, got := []byte("12345678"), make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		c.Write(msg)
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkBulk measures throughput of one proxied connection into a sink
// (compare BenchmarkBulkDirect).
func BenchmarkBulk(b *testing.B) {
	be := startServer(b, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	p := startProxy(b, Config{Name: "b", Upstream: "app"}, newUpstream(b, "app", rr(), be.addr))
	benchBulk(b, p.addr)
}

func BenchmarkBulkDirect(b *testing.B) {
	be := startServer(b, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	benchBulk(b, be.addr)
}

func benchBulk(b *testing.B, addr string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}
