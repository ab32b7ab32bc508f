//go:build !unix

package httpproxy

import (
	"testing"
	"time"
)

// reportCPU reports nothing where the process's CPU time is not read.
func reportCPU(*testing.B, time.Duration) {}

func processCPU() time.Duration { return 0 }
