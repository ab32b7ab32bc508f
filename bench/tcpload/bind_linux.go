//go:build linux

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindAddressNoPort has a socket bound to a source address take its port
// at connect (IP_BIND_ADDRESS_NO_PORT), which may then reuse a port that
// another destination has, instead of at bind, which must find one free
// for every destination.
func bindAddressNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
