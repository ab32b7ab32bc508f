//go:build linux

package evloop

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls below are the ones a loop makes for every connection besides
// its reads and writes: unix's own, but through RawSyscall, as Read and
// Write are. None of them waits on the descriptors a loop owns, so the
// runtime need not be told (its entersyscall and exitsyscall, which let
// the scheduler hand the processor away and take it back, cost more than
// these calls do on loopback). A TCP connection on the loops made seven
// such calls, from accept to close.

// Close closes fd without telling the runtime. Never use it on a socket
// whose close may wait: SO_LINGER with a timeout (a linger of 0, which
// resets, does not wait), or a descriptor in blocking mode the runtime
// polls (the net package's).
func Close(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return errnoErr(e)
	}
	return nil
}

// Shutdown shuts down how (unix.SHUT_WR, ...) of fd, a socket, without
// telling the runtime.
func Shutdown(fd, how int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0); e != 0 {
		return errnoErr(e)
	}
	return nil
}

// SockOpt is a socket option with an int value (setsockopt(2)).
type SockOpt struct{ Level, Name, Value int }

// Set sets o on fd without telling the runtime.
func (o SockOpt) Set(fd int) error {
	v := int32(o.Value)
	if _, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(o.Level), uintptr(o.Name), uintptr(unsafe.Pointer(&v)), 4, 0); e != 0 {
		return errnoErr(e)
	}
	return nil
}

// On reports whether fd has o set to its Value (getsockopt(2)).
func (o SockOpt) On(fd int) bool {
	v, err := unix.GetsockoptInt(fd, o.Level, o.Name)
	return err == nil && v == o.Value
}

// epollCtl is epoll_ctl(2) without telling the runtime.
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	if _, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0); e != 0 {
		return errnoErr(e)
	}
	return nil
}
