package tcpproxy

import "syscall"

// listenBacklog0 calls listen(2) again with a backlog of 0, which Linux
// allows on a listening socket to change its backlog.
func listenBacklog0(rc syscall.RawConn) error {
	var lerr error
	err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), 0) })
	if err != nil {
		return err
	}
	return lerr
}
