// Package grpcpeers measures switchboard's gRPC picks against other Go
// projects' in the same run. It is a module of its own so that the peers
// (go-zero and its dependency tree) stay out of switchboard's go.mod; it
// replaces switchboard with the checkout two directories up.
//
//	cd bench/grpcpeers && go test -run '^$' -bench . -benchmem
package grpcpeers
