package tcpproxy

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// BenchmarkConnect measures one proxied connection end to end: connect,
// 8-byte echo, close (compare BenchmarkConnectDirect). allocs/op counts
// the client's and the backend's allocations too; proxy-allocs/conn is the
// proxy's alone: allocs/op less those of the same cycle without the proxy,
// measured in the same benchmark.
func BenchmarkConnect(b *testing.B) {
	be := startServer(b, echo)
	p := startProxy(b, Config{Name: "b", Upstream: "app"}, newUpstream(b, "app", rr(), be.addr))
	direct := mallocsPerCycle(b, be.addr, 2000)
	proxied := mallocsPerCycle(b, p.addr, 2000)
	benchConnect(b, p.addr)
	b.ReportMetric(proxied-direct, "proxy-allocs/conn")
}

// mallocsPerCycle is the heap allocations of the whole process per
// connect + echo + close cycle to addr, over n cycles.
func mallocsPerCycle(b *testing.B, addr string, n int) float64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		connectOnce(b, addr)
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.Mallocs-m0.Mallocs) / float64(n)
}

func BenchmarkConnectDirect(b *testing.B) {
	be := startServer(b, echo)
	benchConnect(b, be.addr)
}

func benchConnect(b *testing.B, addr string) {
	b.ReportAllocs()
	for b.Loop() {
		connectOnce(b, addr)
	}
}

func connectOnce(b *testing.B, addr string) {
	var msg, got [8]byte
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	c.Write(msg[:])
	if _, err := io.ReadFull(c, got[:]); err != nil {
		b.Fatal(err)
	}
	c.Close()
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
