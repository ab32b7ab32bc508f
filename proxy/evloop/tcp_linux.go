//go:build linux

package evloop

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Accept takes one connection from lfd, a non-blocking listening socket:
// accept4(2), the new descriptor non-blocking and close-on-exec, through
// RawSyscall (it never waits). It returns the connection's descriptor and
// the peer's address (read from accept4's own result: no getpeername), or
// EAGAIN when no connection is waiting.
func Accept(lfd int) (int, netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	fd, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, errnoErr(e)
	}
	return int(fd), rawAddrPort(&rsa), nil
}

// rawAddrPort is an IPv4 or IPv6 socket address as a netip.AddrPort (an
// IPv4-mapped IPv6 address unmapped); the zero AddrPort for other families.
func rawAddrPort(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), port(a.Port))
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), port(a.Port))
	}
	return netip.AddrPort{}
}

// port converts a port in network byte order, as the kernel stores it.
func port(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return binary.BigEndian.Uint16(b[:])
}

// LocalAddrPort is the address a connected socket's end is bound to
// (getsockname(2)): the address a client reached.
func LocalAddrPort(fd int) (netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	_, _, e := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return netip.AddrPort{}, errnoErr(e)
	}
	return rawAddrPort(&rsa), nil
}

// Dial starts a non-blocking TCP connect to addr and returns the new
// socket (non-blocking, close-on-exec). The connect is under way (or, on
// loopback, sometimes already done): register the socket for Writable and,
// when it is told, ask ConnectResult how it went. An error means no socket
// is left open (a refused connect may show here already). An IPv6 zone is
// not used (naming its interface takes a lookup): dial a zoned link-local
// address with DialBlocking.
func Dial(addr netip.AddrPort) (int, error) {
	a := addr.Addr()
	family := unix.AF_INET
	var rsa unix.RawSockaddrAny
	var n uintptr
	if a.Is4() || a.Is4In6() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		sa.Family = unix.AF_INET
		sa.Addr = a.Unmap().As4()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], addr.Port())
		n = unix.SizeofSockaddrInet4
	} else {
		family = unix.AF_INET6
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa))
		sa.Family = unix.AF_INET6
		sa.Addr = a.As16()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], addr.Port())
		n = unix.SizeofSockaddrInet6
	}
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if e != 0 {
		return -1, errnoErr(e)
	}
	// A non-blocking connect never waits: it sends the SYN and returns.
	_, _, e = unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&rsa)), n)
	if e != 0 && e != unix.EINPROGRESS {
		unix.Close(int(fd))
		return -1, errnoErr(e)
	}
	return int(fd), nil
}

// DialBlocking dials addr (a host name too: its lookup blocks) with d and
// returns a non-blocking, close-on-exec duplicate of the connection's
// descriptor for a loop (the net.Conn is closed). Call it off the loop, on
// a goroutine of its own, and Post the result back.
func DialBlocking(ctx context.Context, d *net.Dialer, addr string) (int, error) {
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return -1, err
	}
	defer nc.Close()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// ConnectResult is how the connect Dial started on fd ended: nil once it
// is established, its error (ECONNREFUSED, ETIMEDOUT, ...) once it failed
// (SO_ERROR). Ask it when the socket is told Writable or Hangup.
func ConnectResult(fd int) error {
	errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if errno != 0 {
		return syscall.Errno(errno)
	}
	return nil
}

// Pipe is a pipe through which Splice moves bytes from one socket to
// another without copying them into user space. Both ends are
// non-blocking. A pipe holds at most its capacity (64 KiB by default on
// Linux): what a connection forwarding through it can hold back.
type Pipe struct{ R, W int }

// NewPipe makes a pipe (pipe2(2), non-blocking, close-on-exec).
func NewPipe() (Pipe, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return Pipe{-1, -1}, err
	}
	return Pipe{R: p[0], W: p[1]}, nil
}

// Close closes both ends.
func (p Pipe) Close() {
	unix.Close(p.R)
	unix.Close(p.W)
}

// Splice moves up to n bytes from rfd to wfd, one of them a pipe, with
// splice(2) (SPLICE_F_MOVE|SPLICE_F_NONBLOCK) through RawSyscall: on
// non-blocking sockets and pipes it never waits. It returns the bytes
// moved, 0 at a socket's end of stream, or EAGAIN: from a socket into a
// pipe, either the socket is empty or the pipe full (splice into an empty
// pipe to tell them apart); from a pipe into a socket, the socket's buffer
// is full.
func Splice(rfd, wfd, n int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(r), nil
}

// Pipes is a loop's pool of empty pipes: a connection takes one when bytes
// are to move and gives it back once they have all gone, so that an idle
// connection holds no pipe and a busy one makes none. Use it on one loop
// only. The zero Pipes keeps up to DefaultPipes.
type Pipes struct {
	free Free[Pipe]
	// Max bounds the pipes kept (0: DefaultPipes); more are closed.
	Max int
	// Size, if not 0, is the capacity asked for new pipes (F_SETPIPE_SZ;
	// the kernel rounds it up to a power of two pages, and caps it at
	// /proc/sys/fs/pipe-max-size): more bytes per splice, more held per
	// connection when a destination stalls.
	Size int
}

// DefaultPipes is how many empty pipes a Pipes keeps by default: as many
// as connections move bytes at once on a busy loop, 256 descriptors.
const DefaultPipes = 128

// Get returns an empty pipe, from the pool or new.
func (ps *Pipes) Get() (Pipe, error) {
	if p, ok := ps.free.Take(); ok {
		return p, nil
	}
	p, err := NewPipe()
	if err == nil && ps.Size > 0 {
		unix.FcntlInt(uintptr(p.W), unix.F_SETPIPE_SZ, ps.Size) // a smaller pipe works too
	}
	return p, err
}

// Put gives p back. A pipe that still holds bytes (empty false) is closed,
// never kept: its bytes must not reach the next connection.
func (ps *Pipes) Put(p Pipe, empty bool) {
	limit := ps.Max
	if limit == 0 {
		limit = DefaultPipes
	}
	if !empty || !ps.free.Keep(p, limit) {
		p.Close()
	}
}

// Kept is the pipes kept, for a look (a test's: are they empty?); they
// are still the pool's.
func (ps *Pipes) Kept() []Pipe { return ps.free.Kept() }

// Close closes every pipe kept.
func (ps *Pipes) Close() {
	for _, p := range ps.free.Kept() {
		p.Close()
	}
	ps.free.Drop()
}

// Forget stops calling fd's handler without telling epoll: for a
// descriptor about to be closed that was never duplicated, whose close
// takes it out of the loop's epoll anyway (one epoll_ctl less than Remove).
// Call it on the loop, and close fd before the loop polls again. (If the
// number is reused at once and registered again, what is left of the old
// file's events in the batch being dispatched is not delivered to the new
// handler: see Loop.Run.)
func (l *Loop) Forget(fd int) {
	if fd < len(l.handlers) {
		l.handlers[fd] = nil
	}
}
