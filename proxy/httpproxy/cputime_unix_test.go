//go:build unix

package httpproxy

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU reports, as cpu-ns/op, the CPU time the process spent from
// start (a processCPU) per operation of b: on a shared, loaded machine a
// steadier figure than the wall time of ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time, user and system, the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
