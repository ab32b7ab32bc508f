package etcd_test

import (
	"context"
	"log"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/etcd"
)

// Register an instance for as long as the process runs, and watch a
// service's instances. (Not run: it needs an etcd on localhost:2379.)
func Example() {
	r, err := etcd.New(etcd.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	ctx := context.Background()
	err = r.Register(ctx, registry.Registration{
		Instance: registry.Instance{ID: "orders-1", Service: "orders", Address: "10.0.0.7", Port: 8080},
		Check:    registry.Check{TTL: 10 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Deregister(ctx, "orders-1")

	w, err := r.Watch(ctx, registry.Query{Service: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for {
		instances, err := w.Next(ctx)
		if err != nil {
			log.Print(err) // etcd ended the watch; Next resumes it
			time.Sleep(time.Second)
			continue
		}
		log.Printf("orders: %d instances", len(instances))
	}
}
