//go:build !unix

package h1

// peekFD is pc.peek where a socket cannot be peeked at without blocking
// (Windows has no MSG_DONTWAIT): an idle connection counts as usable, and
// one the peer closed meanwhile fails its next write or read, which the
// broken-exchange retry covers as it does a close that races the reuse.
func (pc *pconn) peekFD(uintptr) bool {
	pc.peekOK = true
	return true
}
