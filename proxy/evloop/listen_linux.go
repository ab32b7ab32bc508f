//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

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

// DupListener is a descriptor of ln's socket for loops to accept from: a
// duplicate, non-blocking and close-on-exec. The engines close ln once
// their loops run (the runtime's poller watches it, and each connection
// that came would wake one of the runtime's threads for nothing), and
// make a net.Listener again with FileListener when the goroutine engine
// takes the socket back.
func DupListener(ln *net.TCPListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("evloop: dup: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("evloop: %w", err)
	}
	return fd, nil
}

// FileListener is a new listener on fd's socket, through a duplicate of
// fd: it accepts from the same queue, and is the caller's (fd stays the
// loops').
func FileListener(fd int) (*net.TCPListener, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("evloop: dup: %w", err)
	}
	// net.FileListener takes a descriptor of its own (another dup) and
	// registers it with the runtime's poller; f, ours, is closed here.
	// os.NewFile, not a net.Listener's File: net.FileListener calls f.Fd,
	// which on a File from net puts the socket (every descriptor of it,
	// the loops' included) in blocking mode until net makes its own
	// duplicate non-blocking, and a loop's accept4 (RawSyscall) in
	// between would block its thread until the next connection.
	f := os.NewFile(uintptr(nfd), "listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("evloop: %w", err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("evloop: fd %d is not a TCP socket", fd)
	}
	return tl, nil
}

// Socket is a listening socket as loops hold it (TakeSocket): a
// descriptor of their own that they accept from (FD), from which
// Listener makes a listener for the goroutine engine, and which Close
// closes once, after which Listener fails (the number may belong to
// another file by then). Its methods may be called from any goroutine.
type Socket struct {
	mu sync.Mutex
	fd int // -1 once closed
}

// TakeSocket is ln's socket for loops (DupListener); the caller closes ln
// once the loops accept (see DupListener for why).
func TakeSocket(ln *net.TCPListener) (*Socket, error) {
	fd, err := DupListener(ln)
	if err != nil {
		return nil, err
	}
	return &Socket{fd: fd}, nil
}

// FD is the descriptor, for the loops to watch and accept from; -1 once
// closed.
func (s *Socket) FD() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fd
}

// Listener is a new listener on the socket (FileListener), the caller's;
// it fails once the socket is closed.
func (s *Socket) Listener() (*net.TCPListener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil, errors.New("evloop: the loops' listening socket is closed")
	}
	return FileListener(s.fd)
}

// Close closes the descriptor, once (the loops have stopped accepting
// from it); later calls do nothing.
func (s *Socket) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}
