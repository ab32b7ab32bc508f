//go:build linux

package h1loop

import (
	"io"

	"golang.org/x/sys/unix"

	"github.com/switchboard-dev/switchboard/proxy/evloop"
)

// socket is a connection's descriptor, registered for
// Readable|Writable|Edge (connEvents), and what the loop's edge-triggered
// events leave it to remember: the loop tells of bytes once, when they
// come, so the socket keeps whether it may hold bytes not read yet (more:
// a read filled the buffer, or bytes came while the connection was busy)
// and whether the peer closed its side (closing: told once, maybe with
// the last bytes, so the socket is read to its end).
type socket struct {
	fd            int
	more, closing bool
}

// told notes the events ev the loop told of.
func (s *socket) told(ev evloop.Events) {
	if ev&(evloop.Readable|evloop.Hangup) != 0 {
		s.more = true
		s.closing = s.closing || ev&(evloop.PeerClosed|evloop.Hangup) != 0
	}
}

// read reads into p: n > 0 bytes, or 0 and no error when the socket holds
// none now (the next are told of), or io.EOF at the end, or the read's
// error. A read that did not fill p took all the socket had: more is
// cleared, and no read is spent to learn that there is nothing yet
// (unless the peer closed, which is not told again).
func (s *socket) read(p []byte) (int, error) {
	for {
		n, err := evloop.Read(s.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			s.more = false
			return 0, nil
		case err != nil:
			s.more = false
			return 0, err
		case n == 0:
			s.more = false
			return 0, io.EOF
		}
		s.more = n == len(p) || s.closing
		return n, nil
	}
}
