//go:build unix

package testutil

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in its own process group, so that a Ctrl-C
// of `go test` does not reach it before our cleanup does.
func ownProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
