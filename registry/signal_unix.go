//go:build unix

package registry

import (
	"os"
	"syscall"
)

// reraise sends sig to the process again once the agent has deregistered:
// Close stopped the agent's notification, so with no other handler Go's
// default for the signal (exit) is back in place, and the process ends as
// it would have without the agent.
func reraise(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		syscall.Kill(os.Getpid(), s)
	}
}
