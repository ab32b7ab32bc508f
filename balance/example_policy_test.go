package balance_test

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// primaryBackup sends every request to the first ready endpoint in the
// pool's order, and a retry to the next one: active/passive failover.
type primaryBackup struct {
	set atomic.Pointer[endpoint.Set] // the latest snapshot; Pick reads it without a lock
}

func (p *primaryBackup) Update(s *endpoint.Set) { p.set.Store(s) }

func (p *primaryBackup) Pick(info *balance.Info) (balance.Result, error) {
	s := p.set.Load()
	if s == nil || len(s.Ready) == 0 {
		return balance.Result{}, balance.ErrNoEndpoint
	}
	ep := s.Ready[0]
	for _, e := range s.Ready {
		if info == nil || !balance.Tried(info.Tried, e) {
			ep = e
			break
		}
	}
	ep.Acquire() // every pick is matched by the Done the caller calls
	return balance.Result{Endpoint: ep, Done: ep.DoneFunc()}, nil
}

// A program registers its policies before it builds any configuration
// that names them: in an init func, or at the top of main before
// cli.Main runs the proxy.
func init() {
	balance.Register("primary_backup", func(cfg balance.Config) (balance.Balancer, error) {
		if err := cfg.Unused(); err != nil { // it reads no key
			return nil, err
		}
		return &primaryBackup{}, nil
	})
}

// A policy of one's own: registered under a name, it is built by
// balance.New and accepted wherever a configuration names a policy (an
// upstream.Config, the proxy's balance: {policy: primary_backup}).
func Example_ownPolicy() {
	b, err := balance.New(balance.Config{Policy: "primary_backup"})
	if err != nil {
		panic(err)
	}
	pool := endpoint.NewPool("orders")
	pool.Subscribe(b.Update)
	pool.Update([]endpoint.Spec{{Address: "a:80"}, {Address: "b:80"}, {Address: "c:80"}})

	var info balance.Info
	r, _ := b.Pick(&info)
	fmt.Println("primary:", r.Endpoint.Address())
	r.Done(endpoint.Outcome{Status: 200})

	// The primary fails its health checks: the pool publishes a new
	// snapshot without it.
	a := pool.Snapshot().All[0]
	a.SetStatus(endpoint.Unhealthy, "health check failed", time.Now())
	pool.Refresh()
	r, _ = b.Pick(&info)
	fmt.Println("after a fails:", r.Endpoint.Address())
	r.Done(endpoint.Outcome{Status: 200})

	fmt.Println(balance.Config{Policy: "primary_backup", SlowStart: time.Second}.Validate())
	// Output:
	// primary: a:80
	// after a fails: b:80
	// slow_start: not used by primary_backup
}
