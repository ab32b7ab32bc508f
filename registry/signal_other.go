//go:build !unix

package registry

import "os"

// reraise ends the process once the agent has deregistered, as the
// signal would have without the agent: a process cannot send itself
// Ctrl-C on Windows, so it exits with status 2, the status Go gives a
// program that ends on an unhandled signal.
func reraise(os.Signal) { os.Exit(2) }
