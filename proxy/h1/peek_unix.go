//go:build unix

package h1

import "syscall"

// peekFD is pc.peek: one non-blocking peek at the connection's socket.
// Only EAGAIN (nothing to read, still open) makes the connection usable.
// (syscall's Recvfrom, not x/sys/unix's: that one's address buffer
// escapes, an allocation per reuse.)
func (pc *pconn) peekFD(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), pc.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	pc.peekOK = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true
}
