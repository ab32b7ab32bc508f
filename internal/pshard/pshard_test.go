package pshard

import (
	"sync"
	"testing"
	"unsafe"
)

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

// TestWordsAreWholeAlignedCacheLines: every shard starts on a CacheLine
// boundary and holds at least n words in whole lines.
func TestWordsAreWholeAlignedCacheLines(t *testing.T) {
	for _, c := range []struct{ shards, n int }{{1, 1}, {2, 1}, {4, 17}, {16, 32}} {
		words, stride := Words(c.shards, c.n)
		if len(words) != c.shards*stride || stride < c.n || stride*8%CacheLine != 0 {
			t.Errorf("Words(%d, %d): %d words, stride %d; want %d shards of whole lines holding %d words", c.shards, c.n, len(words), stride, c.shards, c.n)
		}
		if a := uintptr(unsafe.Pointer(&words[0])); a%CacheLine != 0 {
			t.Errorf("Words(%d, %d): shard 0 at %#x, not on a %d-byte boundary", c.shards, c.n, a, CacheLine)
		}
	}
}

// TestIntSumsStepsFromEveryCPU: goroutines adding and taking at once, and
// steps on chosen shards, leave the exact sum.
func TestIntSumsStepsFromEveryCPU(t *testing.T) {
	c := NewInt(4)
	const workers, n = 8, 20000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				c.Add(2)
				if i%2 == 0 || w == 0 {
					c.Add(-1)
				}
			}
		})
	}
	wg.Wait()
	// Worker 0 took one back each time (n), the others every other time.
	if got, want := c.Load(), int64(workers*2*n-n-(workers-1)*n/2); got != want {
		t.Fatalf("sum after concurrent steps = %d, want %d", got, want)
	}
	c.AddAt(1, 5)
	c.AddAt(6, -3) // shard 6 mod 4: 2
	if got, want := c.Load(), int64(workers*2*n-n-(workers-1)*n/2+2); got != want {
		t.Fatalf("sum after steps on chosen shards = %d, want %d", got, want)
	}
	if allocs := testing.AllocsPerRun(1000, func() { c.Add(1) }); allocs != 0 {
		t.Fatalf("Add allocates %v times, want 0", allocs)
	}
}
