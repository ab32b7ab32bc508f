//go:build !unix

package testutil

import "os/exec"

// ownProcessGroup leaves cmd in the test's process group where process
// groups are not Unix's.
func ownProcessGroup(*exec.Cmd) {}
