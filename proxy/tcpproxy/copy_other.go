//go:build !linux

package tcpproxy

import (
	"io"
	"net"
	"sync/atomic"
)

type rawConn = struct{}

// copyConn moves src's bytes to dst until src's EOF, counting them in count
// as they go: without splice(2) the copy passes through user space anyway,
// and the count is what the activity check reads.
func copyConn(dst, src *net.TCPConn, count *atomic.Uint64) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			count.Add(uint64(nw))
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// received returns the bytes forwarded so far in each direction.
func (c *conn) received() (down, up uint64, ok bool) {
	return c.copied[0].Load(), c.copied[1].Load(), true
}
