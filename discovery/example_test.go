package discovery_test

import (
	"context"
	"fmt"
	"time"

	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/registry"
)

// fixed is a registry that knows one set of instances and never changes.
type fixed []registry.Instance

func (f fixed) Instances(context.Context, registry.Query) ([]registry.Instance, error) {
	return f, nil
}

func (f fixed) Watch(context.Context, registry.Query) (registry.Watcher, error) {
	return &fixedWatcher{set: f}, nil
}

type fixedWatcher struct {
	set  fixed
	sent bool
}

func (w *fixedWatcher) Next(ctx context.Context) ([]registry.Instance, error) {
	if !w.sent {
		w.sent = true
		return w.set, nil
	}
	<-ctx.Done() // no change, ever
	return nil, ctx.Err()
}

func (w *fixedWatcher) Stop() {}

// A view feeds an endpoint pool: wait for the first snapshot, then let
// every new one update the pool.
func Example() {
	reg := fixed{
		{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 9001, Weight: 3},
		{ID: "orders-2", Service: "orders", Address: "10.0.0.2", Port: 9001},
	}
	d, err := discovery.New(reg, discovery.Options{Registry: "example"})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	v := d.Watch(registry.Query{Service: "orders", PassingOnly: true})
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := v.Ready(ctx); err != nil {
		panic(err)
	}
	pool := endpoint.NewPool("orders")
	defer v.Subscribe(func(s discovery.Snapshot) { pool.Update(discovery.Specs(s.Instances)) })()

	for _, ep := range pool.Snapshot().All {
		fmt.Println(ep.Address(), "weight", ep.Weight())
	}
	st := d.Status()[0]
	fmt.Println(st.Service, "instances:", st.Instances, "stale:", st.Stale)
	// Output:
	// 10.0.0.1:9001 weight 3
	// 10.0.0.2:9001 weight 1
	// orders instances: 2 stale: false
}
