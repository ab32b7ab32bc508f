//go:build linux

package evloop

import (
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// echoConn echoes what it reads, on the loop: read after readiness, write
// at once (the benchmark's messages are small enough that a write never
// meets a full socket buffer; one that did would fail the benchmark).
type echoConn struct {
	l    *Loop
	buf  []byte // the loop's, shared by its connections
	b    *testing.B
	open map[int]bool // the connections not closed yet
}

func (e *echoConn) OnEvent(fd int, _ Events) {
	for {
		n, err := unix.Read(fd, e.buf)
		if n <= 0 || err != nil {
			if err != unix.EAGAIN {
				e.l.Remove(fd)
				unix.Close(fd)
				delete(e.open, fd)
			}
			return
		}
		if w, err := unix.Write(fd, e.buf[:n]); w != n || err != nil {
			e.b.Errorf("echo write: %d of %d, %v", w, n, err)
			return
		}
	}
}

// BenchmarkEcho measures one 64-byte request and its echo over loopback
// keep-alive connections (one per client goroutine), served by a loop
// (reads after readiness, no goroutine per connection) and by a goroutine
// per connection over the runtime's netpoller, the goroutine engine's
// model: the I/O model alone, without HTTP, in the same run.
//
//	go test -run '^$' -bench Echo -count 5 ./proxy/evloop/
func BenchmarkEcho(b *testing.B) {
	msg := make([]byte, 64)
	client := func(b *testing.B, addr string) {
		b.SetBytes(int64(len(msg)))
		b.SetParallelism(16) // 32 connections on 2 cores, as a load test keeps many open
		b.RunParallel(func(pb *testing.PB) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			in := make([]byte, len(msg))
			for pb.Next() {
				if _, err := c.Write(msg); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, in); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("evloop", func(b *testing.B) {
		l, err := New()
		if err != nil {
			b.Fatal(err)
		}
		lfd, err := ListenReusePort("127.0.0.1:0", 1024)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(lfd)
		addr, _ := LocalAddr(lfd)
		echo := &echoConn{l: l, buf: make([]byte, 16<<10), b: b, open: map[int]bool{}}
		l.Add(lfd, Readable, handlerFunc(func(fd int, _ Events) {
			for {
				nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				if err != nil {
					return
				}
				unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
				l.Add(nfd, Readable, echo)
				echo.open[nfd] = true
			}
		}))
		done := make(chan error, 1)
		go func() { done <- l.Run() }()
		client(b, addr.String())
		l.Close()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		for fd := range echo.open { // the loop has stopped: its state is ours
			unix.Close(fd)
		}
	})
	b.Run("goroutine-per-conn", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					buf := make([]byte, 16<<10)
					for {
						n, err := c.Read(buf)
						if err != nil {
							return
						}
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
				}()
			}
		}()
		client(b, ln.Addr().String())
	})
}
