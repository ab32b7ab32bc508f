// Command tcpproxy is the benchmark harness for switchboard's L4 data plane:
// one proxy/tcpproxy Listener in front of a static pool, built directly on the
// package (not on switchboard's config), so that bench/run-tcp.sh can
// measure the data plane before `listeners: - protocol: tcp` is wired into
// `switchboard serve`.
//
//	tcpproxy -listen 127.0.0.1:18180 -targets 127.0.0.1:19101,127.0.0.1:19102
//
// It runs until SIGINT or SIGTERM, then drains for up to 5s.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // -pprof serves /debug/pprof
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	tcpproxy "github.com/switchboard-dev/switchboard/proxy/tcpproxy"
)

type upstream struct {
	name string
	bal  balance.Balancer
}

func (u *upstream) Name() string { return u.name }

func (u *upstream) Pick(info *balance.Info) (balance.Result, error) { return u.bal.Pick(info) }

func main() {
	listen := flag.String("listen", "127.0.0.1:18180", "address to accept on")
	targets := flag.String("targets", "", "comma-separated endpoint addresses (required)")
	policy := flag.String("policy", balance.RoundRobinName, "balancing policy")
	idle := flag.Duration("idle-timeout", 0, "idle timeout (0: the default 10m)")
	maxConns := flag.Int("max-conns", 0, "max_conns (0: no limit)")
	pprofAddr := flag.String("pprof", "", "serve /debug/pprof on this address")
	flag.Parse()
	if err := run(*listen, *targets, *policy, *idle, *maxConns, *pprofAddr); err != nil {
		fmt.Fprintln(os.Stderr, "tcpproxy:", err)
		os.Exit(1)
	}
}

func run(listen, targets, policy string, idle time.Duration, maxConns int, pprofAddr string) error {
	if targets == "" {
		return fmt.Errorf("-targets: required")
	}
	var specs []endpoint.Spec
	for _, a := range strings.Split(targets, ",") {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("-targets: %q: %v", a, err)
		}
		specs = append(specs, endpoint.Spec{Address: a})
	}
	bc := balance.Config{Policy: policy}
	if policy == balance.ConsistentHashName || policy == balance.MaglevName {
		bc.HashKey = balance.HashKeyClientIP
	}
	bal, err := balance.New(bc)
	if err != nil {
		return fmt.Errorf("-policy: %w", err)
	}
	pool := endpoint.NewPool("bench")
	defer pool.Subscribe(bal.Update)()
	pool.Update(specs)
	up := &upstream{name: "bench", bal: bal}

	ln, err := tcpproxy.Listen(context.Background(), listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := tcpproxy.NewListener(ln, tcpproxy.Config{Name: "bench", Upstream: "bench", IdleTimeout: idle, MaxConns: maxConns},
		func(name string) tcpproxy.Upstream {
			if name == up.name {
				return up
			}
			return nil
		}, nil, log)
	if err != nil {
		ln.Close()
		return err
	}
	if pprofAddr != "" {
		go func() {
			if err := http.ListenAndServe(pprofAddr, nil); err != nil {
				log.Error("pprof listener", "err", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.Shutdown(dctx)
	return <-served
}
