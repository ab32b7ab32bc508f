package tcpproxy

import (
	"io"
	"net"
	"strconv"
	"testing"
)

// BenchmarkBulkPipeSize is BenchmarkBulk on the event loop with pipes of
// several sizes, and on the goroutine engine (whose net package asks for
// 1 MiB pipes), in one run.
func BenchmarkBulkPipeSize(b *testing.B) {
	for _, size := range []int{0, 256 << 10, 1 << 20, -1} {
		name := "loop-" + strconv.Itoa(size>>10) + "KiB"
		engine := EngineEventLoop
		if size == 0 {
			name = "loop-default"
		}
		if size < 0 {
			name, engine, size = "goroutine", EngineGoroutine, 0
		}
		b.Run(name, func(b *testing.B) {
			defer func(old int) { pipeSize = old }(pipeSize)
			pipeSize = size
			be := startServer(b, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
			p := startProxy(b, Config{Name: "b", Upstream: "app", Engine: engine}, newUpstream(b, "app", rr(), be.addr))
			benchBulk(b, p.addr)
		})
	}
}
