package pshard

import "testing"

func TestCountIsAPowerOfTwoAtLeastProcsUpToLimit(t *testing.T) {
	for _, c := range []struct{ procs, limit, want int }{
		{1, 16, 1}, {2, 16, 2}, {3, 16, 4}, {5, 16, 8}, {16, 16, 16}, {17, 16, 16}, {256, 16, 16},
		{3, 8, 4}, {9, 8, 8}, {0, 8, 1},
	} {
		if got := Count(c.procs, c.limit); got != c.want {
			t.Errorf("Count(%d, %d) = %d, want %d", c.procs, c.limit, got, c.want)
		}
	}
}

func TestGetAndPutDoNotAllocate(t *testing.T) {
	if allocs := testing.AllocsPerRun(1000, func() { Put(Get()) }); allocs != 0 {
		t.Fatalf("Get and Put allocate %v times, want 0", allocs)
	}
}
