// Command switchboard is a load balancer, service registry and resilience
// toolkit in one binary.
//
//	switchboard serve    --config FILE   run the proxy
//	switchboard validate --config FILE   check a configuration, print every problem
//	switchboard status   [--admin ADDR]  show upstreams and endpoints
//	switchboard demo                     run a self-contained demo
//	switchboard version
//
// The command lives in package cli, so that a program of one's own can
// register a balancing policy and then run the same command (see
// github.com/switchboard-dev/switchboard/cmd/switchboard/cli).
package main

import (
	"os"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
