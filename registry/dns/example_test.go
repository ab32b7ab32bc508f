package dns_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registry/dns"
)

// Discover a Consul service through Consul's DNS interface. (Not run: it
// needs a Consul agent answering DNS on 127.0.0.1:8600.)
func Example() {
	d, err := dns.New(dns.Config{
		Name:    "_orders._tcp.service.consul",
		Servers: []string{"127.0.0.1:8600"},
		MinTTL:  time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	w, err := d.Watch(ctx, registry.Query{Service: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for {
		instances, err := w.Next(ctx) // waits for the records' TTL, returns changes only
		if err != nil {
			log.Print(err) // keep serving the last set; Next tries again after MinTTL
			continue
		}
		for _, in := range instances {
			fmt.Println(in.HostPort(), in.Weight)
		}
	}
}
