package client

import (
	"context"

	"github.com/switchboard-dev/switchboard/balance"
)

// WithHashKey returns a context whose calls carry key as their hash key:
// a service balanced by consistent_hash or maglev sends every call with
// the same key to the same endpoint (while it is healthy), whatever the
// upstream's hash_key would find in the request. Calls to services with
// other policies ignore it. It is balance.WithHashKey, so the same context
// keys gRPC calls through client/grpcclient too.
func WithHashKey(ctx context.Context, key string) context.Context {
	return balance.WithHashKey(ctx, key)
}

// HashKey returns the hash key WithHashKey put in ctx.
func HashKey(ctx context.Context) (key string, ok bool) { return balance.HashKeyFrom(ctx) }
