package grpcclient

import (
	"maps"

	"google.golang.org/grpc/resolver"
)

// Attributes are what the switchboard balancers read from a resolved
// endpoint besides its address. The switchboard resolver sets them from
// the registry's instance; another resolver can set them with
// SetAttributes.
type Attributes struct {
	// ID is the registry's instance ID.
	ID string
	// Weight is the relative share of traffic (below 1: 1).
	Weight int
	// Zone is the instance's locality.
	Zone string
	// Meta is the instance's metadata; it must not be modified.
	Meta map[string]string
}

// Equal reports whether a and o (an Attributes) are the same; gRPC
// compares endpoint attributes with it.
func (a Attributes) Equal(o any) bool {
	b, ok := o.(Attributes)
	return ok && a.ID == b.ID && max(a.Weight, 1) == max(b.Weight, 1) && a.Zone == b.Zone && maps.Equal(a.Meta, b.Meta)
}

type attrKey struct{}

// SetAttributes returns ep with at among its attributes.
func SetAttributes(ep resolver.Endpoint, at Attributes) resolver.Endpoint {
	ep.Attributes = ep.Attributes.WithValue(attrKey{}, at)
	return ep
}

// AttributesOf returns the Attributes SetAttributes put on ep.
func AttributesOf(ep resolver.Endpoint) (Attributes, bool) {
	at, ok := ep.Attributes.Value(attrKey{}).(Attributes)
	return at, ok
}
