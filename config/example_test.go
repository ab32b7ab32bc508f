package config_test

import (
	"errors"
	"fmt"

	"github.com/switchboard-dev/switchboard/config"
)

func ExampleParse() {
	cfg, err := config.Parse("lb.yaml", []byte(`
listeners:
  - name: web
    listen: 127.0.0.1:8080
    routes:
      - match: {path_prefix: /orders, methods: [get]}
        upstream: orders
upstreams:
  orders:
    targets:
      - {address: 127.0.0.1:9001, weight: 3}
      - {address: 127.0.0.1:9002}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := cfg.Listeners[0].Routes[0]
	fmt.Println("route:", r.Name, r.Match.Methods, r.Match.PathPrefix, "timeout", *r.Timeout)
	u := cfg.Upstreams[r.Upstream]
	fmt.Println("upstream:", u.Balance.Policy, u.Protocol, "connect timeout", u.Timeouts.Connect)
	for _, t := range u.Targets {
		fmt.Println("target:", t.Address, "weight", t.Weight)
	}
	fmt.Println("admin:", cfg.Admin.Listen)
	// Output:
	// route: web/0 [GET] /orders timeout 1m0s
	// upstream: round_robin http1 connect timeout 2s
	// target: 127.0.0.1:9001 weight 3
	// target: 127.0.0.1:9002 weight 1
	// admin: 127.0.0.1:9901
}

func ExampleErrors() {
	_, err := config.Parse("lb.yaml", []byte(`
listeners:
  - name: web
    listen: 127.0.0.1:8080
    timeouts: {idle: forever}
    routes:
      - upstream: ordrs
upstreams:
  orders:
    targets: [{address: 127.0.0.1:9001, wieght: 3}]
`))
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, p := range errs {
			fmt.Println(p)
		}
	}
	// Output:
	// lb.yaml:5:22: expected a duration like "250ms", got "forever"
	// lb.yaml:7:19: route upstream "ordrs" is not defined (defined: orders)
	// lb.yaml:10:41: unknown key "wieght" in target (known: address, id, weight, zone)
}
