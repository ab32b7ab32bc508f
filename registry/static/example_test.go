package static_test

import (
	"context"
	"fmt"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/static"
)

// A fixed list serves the instances of each service; Parse reads the same
// list from a file's content and says exactly what is wrong with it.
func Example() {
	r, _ := static.New([]registry.Instance{
		{ID: "orders-1", Service: "orders", Address: "10.0.0.1", Port: 8080, Weight: 3},
		{ID: "orders-2", Service: "orders", Address: "10.0.0.2", Port: 8080},
	})
	got, _ := r.Instances(context.Background(), registry.Query{Service: "orders"})
	for _, in := range got {
		fmt.Println(in.ID, in.HostPort(), in.EffectiveWeight())
	}

	_, err := static.Parse("services.yaml", []byte("services:\n  orders:\n    - {address: 10.0.0.3, port: 0}\n"))
	fmt.Println(err)
	// Output:
	// orders-1 10.0.0.1:8080 3
	// orders-2 10.0.0.2:8080 1
	// services.yaml:3:33: services.orders[0].port: 0 is out of range 1-65535
}
