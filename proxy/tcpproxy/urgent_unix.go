//go:build unix

package tcpproxy

import "syscall"

// inlineUrgent has a socket take TCP urgent (out-of-band) data in its
// place in the stream (SO_OOBINLINE), so that the proxy forwards it like
// any other byte. Without it the kernel sets the urgent byte apart, out of
// a read's reach, and a read or a splice stops at its mark: the byte was
// lost, and the bytes after it were held back until more came, or, once
// spliced, dropped at the end with a reset (nginx's stream module drops
// the byte; RFC 6093 asks those that must take urgent data to take it
// inline). Listen sets it on the listening socket, from which Linux
// copies it into each accepted connection: the event-loop engine relies
// on that (presetAccepted); the goroutine engine tells each connected
// socket.
func inlineUrgent(c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_OOBINLINE, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// dialControl is the net.Dialer Control of connections to endpoints.
func dialControl(_, _ string, c syscall.RawConn) error { return inlineUrgent(c) }
