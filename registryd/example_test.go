package registryd_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hashicorp/consul/api"
	"github.com/switchboard-dev/switchboard/registry"
	"github.com/switchboard-dev/switchboard/registryd"
)

// A service registers over HTTP with the official Consul client; the same
// process discovers it without an HTTP hop.
func ExampleServer() {
	srv, err := registryd.New(registryd.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if err := srv.Start(); err != nil {
		panic(err)
	}

	cfg := api.DefaultConfig()
	cfg.Address = srv.Addr()
	client, _ := api.NewClient(cfg)
	err = client.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "orders-1", Name: "orders", Address: "10.0.0.5", Port: 9001,
		Meta:  map[string]string{"zone": "eu-1"},
		Check: &api.AgentServiceCheck{TTL: "10s", Status: "passing"},
	})
	if err != nil {
		panic(err)
	}

	ins, _ := srv.Discoverer().Instances(context.Background(), registry.Query{Service: "orders", PassingOnly: true})
	for _, in := range ins {
		fmt.Println(in.ID, in.HostPort(), in.Zone, in.Health)
	}
	// Output: orders-1 10.0.0.5:9001 eu-1 passing
}
