//go:build unix

package h1

import "golang.org/x/sys/unix"

// peekFD is pc.peek: one non-blocking peek at the connection's socket.
// Only EAGAIN (nothing to read, still open) makes the connection usable.
func (pc *pconn) peekFD(fd uintptr) bool {
	_, _, err := unix.Recvfrom(int(fd), pc.peekBuf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	pc.peekOK = err == unix.EAGAIN || err == unix.EWOULDBLOCK
	return true
}
