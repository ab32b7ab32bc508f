package static

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-dev/switchboard/registry"
)

// instanceKeys are the keys an instance in a file may have.
var instanceKeys = []string{"id", "address", "port", "weight", "zone", "tags", "meta"}

// fileInstance is one instance as written in a file.
type fileInstance struct {
	ID, Address, Zone string
	Port, Weight      int
	Tags              []string
	Meta              map[string]string
}

// posError is a problem at a place in a file: FILE:LINE:COL: message.
type posError struct {
	file      string
	line, col int
	msg       string
}

func (e *posError) Error() string {
	if e.line == 0 {
		return e.file + ": " + e.msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.file, e.line, e.col, e.msg)
}

func errAt(file string, n *yaml.Node, format string, args ...any) error {
	e := &posError{file: file, msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.line, e.col = n.Line, n.Column
	}
	return e
}

// Parse reads a services file (YAML, or JSON, which the YAML parser
// reads too) and returns its instances sorted by service and ID. name is
// the file name errors start with; errors say where and which field:
//
//	services.yaml:7:15: services.orders[1].port: 70000 is out of range 1-65535
//
// The format:
//
//	services:
//	  orders:
//	    - {id: orders-1, address: 10.0.0.1, port: 8080, weight: 3, zone: eu-1a, tags: [v2], meta: {build: "42"}}
//	    - {address: 10.0.0.2, port: 8080}   # id defaults to address:port
func Parse(name string, data []byte) ([]registry.Instance, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml's own messages carry "line N".
		return nil, &posError{file: name, msg: err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, &posError{file: name, msg: "services: missing (the file is empty)"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errAt(name, root, "the file must be a mapping with a services key")
	}
	var services *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "services" {
			return nil, errAt(name, k, "%s: unknown key (want services)", k.Value)
		}
		services = v
	}
	if services == nil {
		return nil, errAt(name, root, "services: missing")
	}
	if services.Kind != yaml.MappingNode {
		if services.Tag == "!!null" {
			return []registry.Instance{}, nil
		}
		return nil, errAt(name, services, "services: must map service names to lists of instances")
	}
	var out []registry.Instance
	for i := 0; i+1 < len(services.Content); i += 2 {
		k, list := services.Content[i], services.Content[i+1]
		svc := k.Value
		path := "services." + svc
		if svc == "" {
			return nil, errAt(name, k, "services: a service name must not be empty")
		}
		if list.Kind != yaml.SequenceNode {
			if list.Tag == "!!null" {
				continue // a service with no instances
			}
			return nil, errAt(name, list, "%s: must be a list of instances", path)
		}
		seen := map[string]*yaml.Node{}
		for j, item := range list.Content {
			ipath := fmt.Sprintf("%s[%d]", path, j)
			inst, err := parseInstance(name, ipath, svc, item)
			if err != nil {
				return nil, err
			}
			if first, dup := seen[inst.ID]; dup {
				return nil, errAt(name, item, "%s.id: %q repeats the id of the instance at line %d", ipath, inst.ID, first.Line)
			}
			seen[inst.ID] = item
			out = append(out, inst)
		}
	}
	sortInstances(out)
	if out == nil {
		out = []registry.Instance{}
	}
	return out, nil
}

func parseInstance(file, path, service string, item *yaml.Node) (registry.Instance, error) {
	if item.Kind != yaml.MappingNode {
		return registry.Instance{}, errAt(file, item, "%s: an instance must be a mapping (id, address, port, ...)", path)
	}
	// Decode field by field, so that a type error names its field and
	// position (yaml's own message gives only a line).
	var fi fileInstance
	fields := map[string]any{
		"id": &fi.ID, "address": &fi.Address, "port": &fi.Port, "weight": &fi.Weight,
		"zone": &fi.Zone, "tags": &fi.Tags, "meta": &fi.Meta,
	}
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		target, ok := fields[k.Value]
		if !ok {
			return registry.Instance{}, errAt(file, k, "%s.%s: unknown key (want one of %s)", path, k.Value, strings.Join(instanceKeys, ", "))
		}
		if err := v.Decode(target); err != nil {
			msg := err.Error()
			var te *yaml.TypeError
			if errors.As(err, &te) && len(te.Errors) > 0 {
				msg = te.Errors[0]
				if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
					msg = after
				}
			}
			return registry.Instance{}, errAt(file, v, "%s.%s: %s", path, k.Value, msg)
		}
	}
	inst := registry.Instance{
		ID: fi.ID, Service: service, Address: fi.Address, Port: fi.Port,
		Weight: fi.Weight, Zone: fi.Zone, Tags: fi.Tags, Meta: fi.Meta,
	}
	if inst.ID == "" && inst.Address != "" {
		inst.ID = net.JoinHostPort(inst.Address, strconv.Itoa(inst.Port))
	}
	if err := inst.Validate(); err != nil {
		// Validate names the field first: "port: 0 is out of range".
		field, _, _ := strings.Cut(err.Error(), ":")
		at := item
		if v := valueOf(item, field); v != nil {
			at = v
		}
		return registry.Instance{}, errAt(file, at, "%s.%v", path, err)
	}
	return inst, nil
}

func valueOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func sortInstances(in []registry.Instance) {
	slices.SortFunc(in, func(a, b registry.Instance) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
