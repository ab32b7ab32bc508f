package discovery

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/registry"
)

func instances(service string, n int) []registry.Instance {
	out := make([]registry.Instance, n)
	for i := range out {
		out[i] = registry.Instance{
			ID:      fmt.Sprintf("%s-%d", service, i),
			Service: service,
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			Port:    8080,
			Tags:    []string{"v2"},
			Meta:    map[string]string{"zone": "eu-1"},
			Zone:    "eu-1",
		}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkScaleOneInstanceUpdate runs discovery at scale: one service of
// 10,000 instances and 1,000 services of 10, every view feeding an
// endpoint.Pool. It reports the memory per instance (view alone, and view
// plus pool) and times the change of one instance of the big service, from
// the registry's answer to the pool holding the new endpoint. It fails if
// that change reaches any other view's subscriber.
func BenchmarkScaleOneInstanceUpdate(b *testing.B) {
	const bigN, smallServices, smallN = 10_000, 1_000, 10
	reg := newFakeRegistry()
	d, err := New(reg, Options{Registry: "bench", Logger: (&logBuffer{}).logger()})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()

	before := heapInUse()
	big := d.Watch(registry.Query{Service: "big"})
	defer big.Close()
	cur := instances("big", bigN)
	reg.send(b, "big", answer{insts: cur})
	views := make([]*View, smallServices)
	for i := range views {
		svc := fmt.Sprintf("svc-%d", i)
		views[i] = d.Watch(registry.Query{Service: svc})
		defer views[i].Close()
		reg.send(b, svc, answer{insts: instances(svc, smallN)})
	}
	for _, v := range append([]*View{big}, views...) {
		if err := v.Ready(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	viewsOnly := heapInUse()

	// Feed pools. Subscribe delivers the current snapshot before returning.
	bigPool := endpoint.NewPool("big")
	applied := make(chan uint64, 1)
	defer big.Subscribe(func(s Snapshot) {
		bigPool.Update(Specs(s.Instances))
		select {
		case applied <- s.Version:
		default:
		}
	})()
	<-applied
	otherCalls := make([]atomic.Int64, smallServices)
	for i, v := range views {
		pool := endpoint.NewPool(fmt.Sprintf("svc-%d", i))
		defer v.Subscribe(func(s Snapshot) {
			otherCalls[i].Add(1)
			pool.Update(Specs(s.Instances))
		})()
	}
	withPools := heapInUse()
	total := float64(bigN + smallServices*smallN)

	b.ResetTimer()
	for i := range b.N {
		// The registry backend builds a new whole set; that is its cost,
		// not discovery's.
		b.StopTimer()
		next := slices.Clone(cur)
		k := i % bigN
		next[k].Port = 9000 + i%1000
		if next[k].Port == cur[k].Port {
			next[k].Port++
		}
		cur = next
		b.StartTimer()
		reg.send(b, "big", answer{insts: next})
		<-applied
	}
	b.StopTimer()
	if got := bigPool.Snapshot(); len(got.All) != bigN {
		b.Fatalf("big pool has %d endpoints, want %d", len(got.All), bigN)
	}
	var others int64
	for i := range otherCalls {
		others += otherCalls[i].Load() - 1 // the first is Subscribe's own
	}
	if others != 0 {
		b.Fatalf("updates of the big service reached other views' subscribers %d times", others)
	}
	b.ReportMetric(float64(others), "other-view-calls")
	// ResetTimer drops reported metrics, so the memory figures come last.
	b.ReportMetric(float64(viewsOnly-before)/total, "view-B/instance")
	b.ReportMetric(float64(withPools-before)/total, "view+pool-B/instance")
}
