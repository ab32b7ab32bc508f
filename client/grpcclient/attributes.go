package grpcclient

import (
	"maps"

	"google.golang.org/grpc/resolver"
)

// Attributes are what the switchboard balancers read from a resolved
// address besides its host:port. The switchboard resolver sets them from
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
// compares address attributes with it.
func (a Attributes) Equal(o any) bool {
	b, ok := o.(Attributes)
	return ok && a.ID == b.ID && max(a.Weight, 1) == max(b.Weight, 1) && a.Zone == b.Zone && maps.Equal(a.Meta, b.Meta)
}

type attrKey struct{}

// SetAttributes returns a with at among its balancer attributes, which
// gRPC hands to the balancer without using them to tell connections apart.
func SetAttributes(a resolver.Address, at Attributes) resolver.Address {
	a.BalancerAttributes = a.BalancerAttributes.WithValue(attrKey{}, at)
	return a
}

// AttributesOf returns the Attributes SetAttributes put on a.
func AttributesOf(a resolver.Address) (Attributes, bool) {
	at, ok := a.BalancerAttributes.Value(attrKey{}).(Attributes)
	return at, ok
}
