package config

import (
	"fmt"
	"os"
	"reflect"
)

// Client is the configuration of a Go program that calls services
// through package client: the proxy file's upstreams and routes, without
// listeners. A call to http://NAME/... goes to upstream NAME, through the
// first of its routes whose match selects it. Every key means what it
// means in the proxy's file, and is checked the same way.
type Client struct {
	// Upstreams are the services the program calls, by name. An upstream
	// with discovery names, in discovery.registry, an entry of Registries
	// or a registry the program hands to the client (client.WithRegistry,
	// which wins over an entry of the same name).
	Upstreams map[string]*Upstream `yaml:"upstreams"`
	// Registries are the external registries (consul, etcd, dns, static)
	// the client opens itself, by name: the keys of the proxy file's
	// registries block.
	Registries map[string]*RegistryBackend `yaml:"registries"`
	// Routes protect the calls to their upstream that match them: the
	// keys of a listener's route, where match.host is not used (the host
	// of a call names its upstream) and neither is buffer_requests (the
	// program holds its own request bodies). A route's name defaults to
	// client/INDEX.
	Routes []Route `yaml:"routes"`
	// Discovery tunes the discovery cache of the registries.
	Discovery Discovery `yaml:"discovery"`

	// File is the path the configuration was loaded from, or the name
	// given to ParseClient. Not a YAML key.
	File string `yaml:"-"`
}

// ClientListener is the listener name that routes of a client
// configuration get their default names from (client/0, client/1, ...).
const ClientListener = "client"

func init() {
	contexts[reflect.TypeFor[Client]()] = "at the top level of a client configuration"
}

// LoadClient reads, validates and defaults the client configuration file
// at path, as Load does a proxy's.
func LoadClient(path string) (*Client, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseClient(path, data)
}

// ParseClient validates and defaults the client configuration in data;
// file names it in problems. On any problem it returns a nil *Client and
// an Errors value listing every problem, each as FILE:LINE:COL: message.
func ParseClient(file string, data []byte) (*Client, error) {
	return parseClient(file, data, osSys)
}

func parseClient(file string, data []byte, h sys) (*Client, error) {
	probs := &problems{file: file}
	root := parseYAML(data, probs)
	if root == nil {
		return nil, probs.errors()
	}
	pos := newPositions(root)
	c := &Client{}
	rootSite := &site{value: root}
	pos.set(c, rootSite)
	d := &decoder{src: data, lookup: h.lookupEnv, pos: pos, probs: probs}
	d.decode(root, reflect.ValueOf(c).Elem(), rootSite)

	// The proxy's checks run on a Config that holds the client's values:
	// the same maps and route list, and the discovery block's positions.
	cfg := &Config{
		Upstreams:  c.Upstreams,
		Registries: c.Registries,
		Discovery:  c.Discovery,
		Listeners:  []Listener{{Name: ClientListener, Routes: c.Routes}},
	}
	pos.set(&cfg.Upstreams, pos.of(&c.Upstreams))
	pos.set(&cfg.Registries, pos.of(&c.Registries))
	pos.set(&cfg.Discovery, pos.of(&c.Discovery))
	pos.set(&cfg.Discovery.EmptyGrace, pos.of(&c.Discovery.EmptyGrace))
	pos.set(&cfg.Discovery.CacheDir, pos.of(&c.Discovery.CacheDir))
	v := &validator{cfg: cfg, pos: pos, probs: probs, readFile: h.readFile, client: true}
	v.checkRegistries()
	v.checkUpstreams()
	v.checkDiscovery()
	names := map[string]any{}
	for j := range c.Routes {
		r := &c.Routes[j]
		v.checkRoute("", r, j, names)
		if v.present(&r.Match.Host) {
			v.keyErrorf(&r.Match.Host, "match.host is not used by a client: the host of a call names its upstream")
		}
		if v.present(&r.BufferRequests) {
			v.keyErrorf(&r.BufferRequests, "buffer_requests is for the proxy: a program holds its own request bodies")
		}
		if v.present(&r.Compress) || v.present(&r.Decompress) {
			at := any(&r.Compress)
			if !v.present(at) {
				at = &r.Decompress
			}
			v.keyErrorf(at, "compress and decompress are for the proxy: a program's HTTP client negotiates its own encodings")
		}
		v.proxyOnlyTraffic(r)
		v.checkClientRewrites(r)
	}
	if !probs.empty() {
		return nil, probs.errors()
	}
	applyDefaults(cfg)
	c.Discovery = cfg.Discovery
	c.Registries = cfg.Registries
	c.File = file
	return c, nil
}
