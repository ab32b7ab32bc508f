package balance

import "context"

type hashKeyCtx struct{}

// WithHashKey returns a context whose calls carry key as their hash key:
// consistent_hash and maglev send every call with the same key to the same
// endpoint (while it is healthy), whatever the hash_key setting would find
// in the request. The Go client's HTTP RoundTripper (package client) and
// its gRPC balancers (package client/grpcclient) both read it; policies
// that do not hash ignore it.
func WithHashKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, hashKeyCtx{}, key)
}

// HashKeyFrom returns the hash key WithHashKey put in ctx.
func HashKeyFrom(ctx context.Context) (key string, ok bool) {
	key, ok = ctx.Value(hashKeyCtx{}).(string)
	return key, ok
}
