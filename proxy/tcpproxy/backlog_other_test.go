//go:build !linux

package tcpproxy

import (
	"errors"
	"syscall"
)

func listenBacklog0(syscall.RawConn) error { return errors.New("only on Linux") }
