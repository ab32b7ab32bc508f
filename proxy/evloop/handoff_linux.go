//go:build linux

package evloop

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Handoff moves fd, a connection served by the loop, to the goroutine
// engine: the loop stops watching it and gives up its descriptor, and the
// returned net.Conn (in the runtime's netpoller, like any other) reads
// first the bytes the loop had read and not used, buffered, then the
// socket's. It is how a request the loop does not serve itself (an
// upgrade, Expect: 100-continue, a body too large or of unknown length)
// goes on: proxy/h1's Server takes the net.Conn with the request's bytes
// still to read. buffered is copied. Call it on the loop. When it fails,
// fd is closed too (the caller must not close it again: its number may be
// another file's by then).
func (l *Loop) Handoff(fd int, buffered []byte) (net.Conn, error) {
	if err := l.Remove(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "evloop-handoff")
	// FileConn works on a duplicate of the descriptor; closing f closes
	// the loop's own. (The loop removed its epoll registration first: one
	// on a descriptor lives as long as any duplicate of it, and would
	// keep reporting events for a connection the loop no longer serves.)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("evloop: handing fd %d off: %w", fd, err)
	}
	if len(buffered) == 0 {
		return c, nil
	}
	return &prefixConn{Conn: c, prefix: append([]byte(nil), buffered...)}, nil
}

// prefixConn is a connection whose first reads return prefix.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection, as *net.TCPConn's does: the
// goroutine engine half-closes before it drains what a client it refused
// still sends, so that the kernel does not reset the connection before
// the client has read the refusal.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
