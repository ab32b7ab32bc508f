package balance_test

import (
	"fmt"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// Weighted round robin spreads an endpoint's turns through the cycle, as
// nginx does, instead of sending it five requests in a row.
func Example_weightedRoundRobin() {
	b, err := balance.New(balance.Config{Policy: balance.WeightedRoundRobinName})
	if err != nil {
		panic(err)
	}
	pool := endpoint.NewPool("orders")
	pool.Subscribe(b.Update)
	pool.Update([]endpoint.Spec{
		{Address: "a:80", Weight: 5},
		{Address: "b:80", Weight: 1},
		{Address: "c:80", Weight: 1},
	})

	var info balance.Info // reused per request
	for range 7 {
		r, err := b.Pick(&info)
		if err != nil {
			panic(err)
		}
		fmt.Print(r.Endpoint.Address()[:1], " ")
		r.Done(endpoint.Outcome{Status: 200})
	}
	fmt.Println()
	// Output: a a b a c a a
}

// A hashing policy sends a request to the endpoint its key maps to; the
// proxy takes the key from where HashKey says and sets Info.Key.
func Example_consistentHash() {
	cfg := balance.Config{Policy: balance.ConsistentHashName, HashKey: "header:x-user-id", BoundedLoad: 1.25}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	key, _ := balance.ParseHashKey(cfg.HashKey)
	fmt.Println(key.Source, key.Name)

	b, _ := balance.New(cfg)
	eps := []*endpoint.Endpoint{
		endpoint.New(endpoint.Spec{Address: "10.0.0.1:80"}),
		endpoint.New(endpoint.Spec{Address: "10.0.0.2:80"}),
		endpoint.New(endpoint.Spec{Address: "10.0.0.3:80"}),
	}
	b.Update(&endpoint.Set{All: eps, Ready: eps})
	first, _ := b.Pick(&balance.Info{Key: "user-42", HasKey: true})
	first.Done(endpoint.Outcome{})
	again, _ := b.Pick(&balance.Info{Key: "user-42", HasKey: true})
	again.Done(endpoint.Outcome{})
	fmt.Println(first.Endpoint == again.Endpoint)

	fmt.Println(balance.Config{Policy: balance.MaglevName, HashKey: "path", TableSize: 65536}.Validate())
	// Output:
	// header X-User-Id
	// true
	// table_size: 65536 is not prime (try 65537)
}
