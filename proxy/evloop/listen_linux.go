//go:build linux

package evloop

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// ListenReusePort opens a non-blocking TCP listening socket on addr
// (host:port) with SO_REUSEPORT, so that every loop can have a listener of
// its own on the same port and the kernel spreads new connections over
// them by a hash of their addresses: no loop accepts for another, and no
// lock is shared. The caller owns the descriptor.
func ListenReusePort(addr string, backlog int) (int, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return -1, fmt.Errorf("evloop: listen %s: %w", addr, err)
	}
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if ip4 := ta.IP.To4(); ip4 != nil || ta.IP == nil {
		s := &unix.SockaddrInet4{Port: ta.Port}
		copy(s.Addr[:], ip4)
		sa = s
	} else {
		family = unix.AF_INET6
		s := &unix.SockaddrInet6{Port: ta.Port}
		copy(s.Addr[:], ta.IP.To16())
		sa = s
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, fmt.Errorf("evloop: listen %s: socket: %w", addr, err)
	}
	for _, opt := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, 1); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("evloop: listen %s: setsockopt: %w", addr, err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("evloop: listen %s: bind: %w", addr, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("evloop: listen %s: %w", addr, err)
	}
	return fd, nil
}

// LocalAddr is the address a listening socket is bound to.
func LocalAddr(fd int) (*net.TCPAddr, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("evloop: getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}, nil
	}
	return nil, fmt.Errorf("evloop: fd %d is not a TCP socket", fd)
}
