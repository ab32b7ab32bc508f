package pipeline

import (
	"testing"
	"time"
)

func TestP95TrackerFollowsRecentLatency(t *testing.T) {
	var tr p95Tracker
	for i := 0; i < 63; i++ {
		tr.add(time.Millisecond)
	}
	if tr.get() != 0 {
		t.Fatal("a p95 before 64 samples")
	}
	for i := 1; i <= 129; i++ {
		tr.add(time.Duration(i) * time.Millisecond)
	}
	// 192 samples (recomputed at every 64th): 64 of 1ms, then 2..129ms.
	// The 95th percentile is sample 182 of the sorted ring: 120ms.
	if got := tr.get(); got != 120*time.Millisecond {
		t.Fatalf("p95 = %v, want 120ms", got)
	}
}
