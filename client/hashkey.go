package client

import "context"

type hashKeyCtx struct{}

// WithHashKey returns a context whose calls carry key as their hash key:
// a service balanced by consistent_hash or maglev sends every call with
// the same key to the same endpoint (while it is healthy), whatever the
// upstream's hash_key would find in the request. Calls to services with
// other policies ignore it.
func WithHashKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, hashKeyCtx{}, key)
}

// HashKey returns the hash key WithHashKey put in ctx.
func HashKey(ctx context.Context) (key string, ok bool) {
	key, ok = ctx.Value(hashKeyCtx{}).(string)
	return key, ok
}
