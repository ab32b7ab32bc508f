//go:build !unix

package tcpproxy

import "syscall"

// inlineUrgent leaves urgent data as the system has it where SO_OOBINLINE
// is not set through a descriptor of this kind.
func inlineUrgent(syscall.RawConn) error { return nil }

// dialControl is the net.Dialer Control of connections to endpoints.
func dialControl(_, _ string, c syscall.RawConn) error { return inlineUrgent(c) }
