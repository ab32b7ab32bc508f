package testutil

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TakeDescriptors leaves the process exactly one free file descriptor,
// for the caller's next dial: it lowers RLIMIT_NOFILE to a few past the
// descriptors open now and opens /dev/null until none is left, then frees
// one. A server in the same process then cannot accept that connection
// (EMFILE). giveBack closes what it took and restores the limit; it may be
// called more than once, and runs at the test's end anyway. Tests that
// call it must not run in parallel with others of their process.
func TakeDescriptors(t testing.TB) (giveBack func()) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	tight := lim
	tight.Cur = uint64(len(fds) + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &tight); err != nil {
		t.Fatal(err)
	}
	var held []int
	done := false
	giveBack = func() {
		if done {
			return
		}
		done = true
		for _, fd := range held {
			unix.Close(fd)
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	}
	t.Cleanup(giveBack)
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	if len(held) == 0 {
		t.Fatal("no descriptor left to take")
	}
	unix.Close(held[len(held)-1])
	held = held[:len(held)-1]
	return giveBack
}
