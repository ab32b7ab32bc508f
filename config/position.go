package config

import (
	"reflect"

	"go.yaml.in/yaml/v3"
)

// site is where one decoded value came from.
type site struct {
	// key is the mapping key that named the value; nil for list elements
	// and the top level.
	key *yaml.Node
	// value is the node the value was decoded from, as written (an alias
	// stays an alias); nil when the key was absent.
	value *yaml.Node
	// parent is the node of the enclosing mapping or list.
	parent *yaml.Node
	// bad is set when decoding the value failed. Semantic checks stay
	// quiet about a bad value: its problem is already reported, and its
	// zero value would only cause echoes ("name is required").
	bad bool
}

// node is the best position for a problem about the value itself: the
// value, else its key, else the enclosing node.
func (s *site) node() *yaml.Node {
	switch {
	case s.value != nil:
		return s.value
	case s.key != nil:
		return s.key
	}
	return s.parent
}

// keyNode is the best position for a problem about the value's name.
func (s *site) keyNode() *yaml.Node {
	if s.key != nil {
		return s.key
	}
	return s.node()
}

// positions is the side table from decoded values to the nodes they came
// from. It is keyed by a pointer to the decoded value (*Config, *Listener,
// &l.Listen, &l.Routes[2], the *Upstream held in the Upstreams map, ...)
// or, for entries of a map whose values are not pointers, by entry(m, key).
// A pointer key is an interface holding the pointer, so &l (a *Listener)
// and &l.Name (a *string), which share an address, stay distinct.
//
// Every field of every decoded struct has a site, present in the file or
// not, so a lookup for a field that was left out finds the enclosing
// mapping.
type positions struct {
	root  *yaml.Node
	sites map[any]*site
}

func newPositions(root *yaml.Node) *positions {
	return &positions{root: root, sites: map[any]*site{}}
}

func (p *positions) set(at any, s *site) { p.sites[at] = s }

// of returns the site recorded for at. For a value the decoder never saw
// (a programming error in a check) it returns a site at the top level, so
// that the problem is still reported.
func (p *positions) of(at any) *site {
	if s := p.sites[at]; s != nil {
		return s
	}
	return &site{parent: p.root}
}

// entryKey identifies an entry of a map in the side table.
type entryKey struct {
	m   uintptr
	key string
}

// entry returns the side-table key for m[key], where m is a map decoded
// from the file (for example a Match's Headers).
func entry(m any, key string) any {
	return entryKey{m: reflect.ValueOf(m).Pointer(), key: key}
}
