package registryd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

// DefaultCheckInterval is the Interval Register gives an HTTP or TCP check
// that has none, as registry/consul does (the HTTP API, like Consul's,
// requires one).
const DefaultCheckInterval = 10 * time.Second

// Register stores r as if it had been registered over HTTP (replacing a
// registration with the same ID and its checks): Instance.Weight becomes
// Weights.Passing, Instance.Zone becomes Meta["zone"], and r.Check, if set,
// becomes the check "service:<id>", which starts critical as in Consul. An
// HTTP or TCP check without Interval runs every DefaultCheckInterval.
// A registration that would take the registry's state past
// Config.MaxStateBytes is refused and changes nothing, as over HTTP.
// It implements registry.Registrar.
func (s *Server) Register(ctx context.Context, r registry.Registration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	in := r.Instance
	if err := in.Validate(); err != nil {
		return fmt.Errorf("registryd: register %q: %w", in.ID, err)
	}
	def := serviceDef{
		ID: in.ID, Name: in.Service, Address: in.Address, Port: in.Port,
		Tags:    slices.Clone(in.Tags),
		Weights: Weights{Passing: in.EffectiveWeight(), Warning: 1},
	}
	if len(in.Meta) > 0 || in.Zone != "" {
		def.Meta = maps.Clone(in.Meta)
		if def.Meta == nil {
			def.Meta = map[string]string{}
		}
		if in.Zone != "" {
			def.Meta["zone"] = in.Zone
		}
	}
	// The same validation as the HTTP API, by the same decoder.
	reg := map[string]any{
		"ID": def.ID, "Name": def.Name, "Address": def.Address, "Port": def.Port,
		"Tags": def.Tags, "Meta": def.Meta, "Weights": def.Weights,
	}
	if c := r.Check; c != (registry.Check{}) {
		chk := map[string]any{}
		switch {
		case c.TTL > 0:
			chk["TTL"] = c.TTL.String()
		case c.HTTP != "":
			chk["HTTP"] = c.HTTP
		case c.TCP != "":
			chk["TCP"] = c.TCP
		}
		interval := c.Interval
		if interval == 0 && c.TTL == 0 && (c.HTTP != "" || c.TCP != "") {
			// The HTTP API requires Interval, as Consul's does; in process
			// it defaults as registry/consul's Register does, so code
			// written against registry.Registrar behaves the same on both.
			interval = DefaultCheckInterval
		}
		// Nonzero values go to the decoder as given, which refuses a
		// negative one naming the field.
		if interval != 0 {
			chk["Interval"] = interval.String()
		}
		if c.Timeout != 0 {
			chk["Timeout"] = c.Timeout.String()
		}
		if c.TTL < 0 {
			chk["TTL"] = c.TTL.String()
		}
		if c.DeregisterCriticalAfter != 0 {
			chk["DeregisterCriticalServiceAfter"] = c.DeregisterCriticalAfter.String()
		}
		reg["Check"] = chk
	}
	body, err := json.Marshal(reg)
	if err != nil {
		return fmt.Errorf("registryd: register %q: %w", in.ID, err)
	}
	def, err = decodeService(body)
	if err != nil {
		return fmt.Errorf("registryd: register %q: %w", in.ID, err)
	}
	if err := s.register(def, true); err != nil {
		return fmt.Errorf("registryd: register %q: %w", in.ID, err)
	}
	return nil
}

// Deregister removes the instance with id and its checks; an unknown id is
// not an error. It implements registry.Registrar.
func (s *Server) Deregister(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.deregister(id, "deregistered in process"); err != nil && !errors.Is(err, errUnknownService) {
		return fmt.Errorf("registryd: deregister %q: %w", id, err)
	}
	return nil
}

// Heartbeat passes the TTL check "service:<id>" of a registration made with
// a TTL. It returns an error wrapping registry.ErrNotRegistered when the
// registration is gone. It implements registry.Heartbeater.
func (s *Server) Heartbeat(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.updateTTL("service:"+id, statusPassing, "")
	if errors.Is(err, errUnknownCheck) {
		return fmt.Errorf("registryd: heartbeat %q: %w", id, registry.ErrNotRegistered)
	}
	if err != nil {
		return fmt.Errorf("registryd: heartbeat %q: %w", id, err)
	}
	return nil
}

// Discoverer returns the registry as a registry.Discoverer, with the same
// index and watch semantics as GET /v1/health/service and no HTTP hop.
// Health is the worst check status, Weight is Weights.Passing (or
// Weights.Warning while the instance is warning, Consul's meaning of the
// two), Zone is Meta["zone"], and an empty service Address is the node's.
func (s *Server) Discoverer() registry.Discoverer { return discoverer{s} }

type discoverer struct{ s *Server }

func (d discoverer) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Service == "" {
		return nil, errors.New("registryd: query: service must not be empty")
	}
	d.s.mu.RLock()
	defer d.s.mu.RUnlock()
	if d.s.closed {
		return nil, errClosed
	}
	return d.s.instancesLocked(q), nil
}

func (d discoverer) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Service == "" {
		return nil, errors.New("registryd: watch: service must not be empty")
	}
	q.Tags = slices.Clone(q.Tags)
	return &watcher{s: d.s, q: q, stop: make(chan struct{})}, nil
}

func (s *Server) instancesLocked(q registry.Query) []registry.Instance {
	out := []registry.Instance{}
	ns := s.names[q.Service]
	if ns == nil {
		return out
	}
	for _, ss := range sortedInstances(ns) {
		h := ss.health()
		if !ss.hasTags(q.Tags) || (q.PassingOnly && h != statusPassing) {
			continue
		}
		w := ss.def.Weights.Passing
		if h == statusWarning {
			w = ss.def.Weights.Warning
		}
		addr := ss.def.Address
		if addr == "" {
			addr = s.nodeAddr // Consul clients fall back to the node's address
		}
		out = append(out, registry.Instance{
			ID: ss.def.ID, Service: ss.def.Name, Address: addr, Port: ss.def.Port,
			Tags: ss.def.Tags, Meta: ss.def.Meta, Weight: w, Zone: ss.def.Meta["zone"],
			Health: registry.Health(h),
		})
	}
	return out
}

// watcher is one in-process watch: it waits on the service's broadcast
// channel like an HTTP blocking query, and returns only snapshots that
// differ from the last one it returned.
type watcher struct {
	s       *Server
	q       registry.Query
	started bool
	index   uint64
	last    []registry.Instance
	stop    chan struct{}
	stopped bool
	// resync makes the first Next after an error return the current
	// instances at once, changed or not (registry.Watcher's contract).
	resync bool
}

func (w *watcher) Next(ctx context.Context) ([]registry.Instance, error) {
	for {
		w.s.mu.RLock()
		closed := w.s.closed
		idx, ch := w.s.nameIndexLocked(w.q.Service)
		var cur []registry.Instance
		if !w.started || idx > w.index {
			cur = w.s.instancesLocked(w.q)
		}
		w.s.mu.RUnlock()
		if closed {
			return nil, errClosed
		}
		if cur == nil && w.resync {
			w.s.mu.RLock()
			cur = w.s.instancesLocked(w.q)
			w.s.mu.RUnlock()
		}
		if cur != nil {
			w.index = idx
			if !w.started || w.resync || !reflect.DeepEqual(cur, w.last) {
				w.started, w.resync = true, false
				w.last = cur
				return cur, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			w.resync = true
			return nil, ctx.Err()
		case <-w.s.ctx.Done():
			return nil, errClosed
		case <-w.stop:
			return nil, errors.New("registryd: watcher stopped")
		}
	}
}

// Stop ends the watch; a Next blocked in another goroutine returns.
func (w *watcher) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.stop)
	}
}

// WatchServices returns every registered service, whatever its instances'
// health, with the sorted union of its instances' tags, and the
// registry's index. Routes follow registrations: a service whose instances
// are all critical keeps its route, and the proxy answers 503 (or its
// fallback) for it rather than falling through to another route;
// deregistering the last instance removes it. With index 0, or an index the registry has moved past,
// it returns at once; otherwise it blocks until anything in the registry
// changes (a registration, a removal, a health change), ctx ends, or the
// server closes. Like a Consul blocking query it may return an unchanged
// result. An index ahead of the registry (from before a restart that lost
// state) returns at once, so the caller resets.
func (s *Server) WatchServices(ctx context.Context, index uint64) (map[string][]string, uint64, error) {
	for {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return nil, 0, errClosed
		}
		if index == 0 || s.index != index {
			out := s.registeredServicesLocked()
			idx := s.index
			s.mu.RUnlock()
			return out, idx, nil
		}
		ch := s.allCh
		s.mu.RUnlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-s.ctx.Done():
			return nil, 0, errClosed
		}
	}
}

func (s *Server) registeredServicesLocked() map[string][]string {
	out := map[string][]string{}
	for name, ns := range s.names {
		set := map[string]bool{}
		found := false
		for _, ss := range ns.instances {
			found = true
			for _, t := range ss.def.Tags {
				set[t] = true
			}
		}
		if found {
			out[name] = slices.Sorted(maps.Keys(set))
		}
	}
	return out
}
