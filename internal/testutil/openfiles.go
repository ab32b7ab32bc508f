package testutil

import (
	"os"
	"testing"
)

// OpenFiles counts the process's open descriptors whose target (what
// /proc/self/fd/N links to: a path, "socket:[inode]", ...) match accepts.
// It reads /proc (Linux).
func OpenFiles(t testing.TB, match func(target string) bool) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && match(target) {
			n++
		}
	}
	return n
}
