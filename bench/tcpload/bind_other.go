//go:build !linux

package main

import "syscall"

// bindAddressNoPort does nothing where IP_BIND_ADDRESS_NO_PORT does not
// exist: the port is taken at bind.
func bindAddressNoPort(_, _ string, _ syscall.RawConn) error { return nil }
