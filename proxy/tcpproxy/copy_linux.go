package tcpproxy

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

type rawConn = syscall.RawConn

// copyConn moves src's bytes to dst until src's EOF. Between two
// *net.TCPConn, (*net.TCPConn).ReadFrom moves them with splice(2) through a
// pipe, never through user space (net/splice_linux.go); nothing may wrap
// either side. count is unused here: the kernel counts (see received).
//
// splice stops for good at a TCP urgent mark, which ReadFrom takes for the
// end: a read after it tells them apart, taking the urgent byte (inline,
// see inlineUrgent) and what follows, or the end; then splicing resumes.
func copyConn(dst, src *net.TCPConn, _ *atomic.Uint64) (int64, error) {
	var total int64
	var buf [512]byte
	for {
		n, err := dst.ReadFrom(src)
		total += n
		if err != nil {
			return total, err
		}
		m, err := src.Read(buf[:])
		if m > 0 {
			w, werr := dst.Write(buf[:m])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
			continue
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// received returns the bytes received so far on the client and the
// upstream socket: tcpi_bytes_received of TCP_INFO (Linux 4.2 and later;
// tcp(7), include/uapi/linux/tcp.h).
func (c *conn) received() (down, up uint64, ok bool) {
	if c.raw[0] == nil {
		r0, err0 := c.client.SyscallConn()
		r1, err1 := c.upstream.SyscallConn()
		if err0 != nil || err1 != nil {
			return 0, 0, false
		}
		c.raw = [2]rawConn{r0, r1}
	}
	down, ok0 := bytesReceived(c.raw[0])
	up, ok1 := bytesReceived(c.raw[1])
	return down, up, ok0 && ok1
}

func bytesReceived(rc syscall.RawConn) (uint64, bool) {
	var n uint64
	var gerr error
	err := rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			gerr = err
			return
		}
		n = info.Bytes_received
	})
	return n, err == nil && gerr == nil
}
