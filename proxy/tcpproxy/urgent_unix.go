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
// inline). Each connected socket is told: Linux refuses the option on a
// listening socket, which would have passed it on.
func inlineUrgent(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = inlineUrgentFD(int(fd)) }); err != nil {
		return err
	}
	return serr
}

func inlineUrgentFD(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_OOBINLINE, 1)
}

// dialControl is the net.Dialer Control of connections to endpoints.
func dialControl(_, _ string, c syscall.RawConn) error { return inlineUrgent(c) }
