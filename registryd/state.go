package registryd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// maxServices bounds the number of registered service instances, so that a
// runaway registrant cannot grow the registry without limit.
const maxServices = 10000

// errFull is returned when maxServices instances are registered.
var errFull = fmt.Errorf("registry full: %d service instances are registered (the limit); deregister some first", maxServices)

// errOverBudget is wrapped by a budgetError: a registration that would
// take the registry's state over Config.MaxStateBytes.
var errOverBudget = errors.New("registry state budget exceeded")

// budgetError is a registration refused for the state budget, with the
// numbers an operator needs to act on it.
type budgetError struct {
	id     string
	grow   int64 // what the registration adds to the state
	state  int64 // the state before it
	budget int64
}

func (e *budgetError) Error() string {
	after := e.state + e.grow
	return fmt.Sprintf("Insufficient storage: registering %q would add %d bytes to the registry's state, making it %d bytes: %d bytes over its budget of %d bytes (%s, registry.max_state_bytes); deregister services, send smaller registrations, or raise max_state_bytes",
		e.id, e.grow, after, after-e.budget, e.budget, humanBytes(e.budget))
}

func (e *budgetError) Unwrap() error { return errOverBudget }

// humanBytes writes n in the largest binary unit that divides it ("64
// MiB"), or in bytes.
func humanBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// errUnknownService and errUnknownCheck are wrapped by lookups of IDs the
// registry does not know.
var (
	errUnknownService = errors.New("unknown service ID")
	errUnknownCheck   = errors.New("unknown check ID")
	errNotTTL         = errors.New("check has no TTL")
)

// checkState is one registered check and its live status.
type checkState struct {
	def         checkDef
	serviceID   string
	serviceName string
	status      string
	output      string
	createIndex uint64
	modifyIndex uint64

	// cancel stops an HTTP or TCP check's runner goroutine.
	cancel context.CancelFunc
	// ttlTimer turns a TTL check critical when it lapses; ttlGen tells a
	// stale timer callback from the current one.
	ttlTimer clock.Timer
	ttlGen   uint64
	// reapTimer deregisters the service when the check has been critical
	// for DeregisterCriticalServiceAfter.
	reapTimer clock.Timer
	reapGen   uint64
}

// serviceState is one registered service instance. def.Checks lists the
// definitions of checks, in the order of checks.
type serviceState struct {
	def serviceDef
	// reg is def encoded as the snapshot stores it, made once when def is
	// stored and never modified (snapshots share it); cost is what the
	// instance is charged of the state budget (entryCost).
	reg         []byte
	cost        int64
	createIndex uint64
	modifyIndex uint64
	checks      []*checkState
}

// nameState is every instance of one service name, with the name's
// index — the highest index of any change to those instances, including
// removals, so it never goes backwards while the name exists — and the
// broadcast channel its watchers wait on, closed and replaced on each
// change.
type nameState struct {
	index     uint64
	changed   chan struct{}
	instances map[string]*serviceState
	// cache holds encoded health answers for the current state, filled by
	// readers under s.mu.RLock (hence cacheMu) and dropped by every change
	// under s.mu.Lock.
	cacheMu sync.Mutex
	cache   map[string]json.RawMessage
}

// health is the worst status of a service's checks; passing without checks.
func (ss *serviceState) health() string {
	h := statusPassing
	for _, c := range ss.checks {
		switch c.status {
		case statusCritical:
			return statusCritical
		case statusWarning:
			h = statusWarning
		}
	}
	return h
}

// nextIndexLocked advances the registry's index: every change gets a new,
// larger index, starting at 1.
func (s *Server) nextIndexLocked() uint64 {
	s.index++
	return s.index
}

// touchNameLocked records a change at idx to the instances of name and wakes
// its watchers. A name with no instances left is forgotten: its later
// queries report the catalog index, which is at least idx.
func (s *Server) touchNameLocked(name string, idx uint64) {
	ns := s.names[name]
	if ns == nil {
		return
	}
	ns.index = idx
	ns.cache = nil
	close(ns.changed)
	ns.changed = make(chan struct{})
	if len(ns.instances) == 0 {
		delete(s.names, name)
	}
	close(s.allCh)
	s.allCh = make(chan struct{})
	s.persistLocked()
}

// touchCatalogLocked records a change to the set of services (registration
// or removal) at idx.
func (s *Server) touchCatalogLocked(idx uint64) {
	s.catalogIndex = idx
	close(s.catalogCh)
	s.catalogCh = make(chan struct{})
}

// nameIndexLocked is the index and the channel of the query on name.
func (s *Server) nameIndexLocked(name string) (uint64, <-chan struct{}) {
	if ns := s.names[name]; ns != nil {
		return ns.index, ns.changed
	}
	return s.catalogIndex, s.catalogCh
}

// register stores def, replacing a service with the same ID. Checks of an
// existing registration that def does not name are kept unless
// replaceChecks (Consul's ?replace-existing-checks). A re-registration that
// changes nothing changes no index and wakes no watcher.
func (s *Server) register(def serviceDef, replaceChecks bool) error {
	// Encoded outside the lock; re-encoded under it only when old checks
	// are merged in.
	reg, err := json.Marshal(def)
	if err != nil {
		return fmt.Errorf("encode service %q: %w", def.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	for i, c := range def.Checks {
		if other := s.checks[c.CheckID]; other != nil && other.serviceID != def.ID {
			return fieldErr(fmt.Sprintf("Checks[%d].CheckID", i), "%q already belongs to service %q", c.CheckID, other.serviceID)
		}
	}
	old := s.services[def.ID]
	if old == nil && len(s.services) >= maxServices {
		return errFull
	}

	// The checks the service ends up with: the new definitions, then the
	// old checks they do not replace.
	want := slices.Clone(def.Checks)
	if old != nil && !replaceChecks {
		for _, oc := range old.checks {
			if !slices.ContainsFunc(want, func(c checkDef) bool { return c.CheckID == oc.def.CheckID }) {
				want = append(want, oc.def)
			}
		}
	}
	newDef := def
	newDef.Checks = want
	if old != nil && reflect.DeepEqual(old.def, newDef) {
		return nil
	}
	if len(want) != len(def.Checks) {
		if reg, err = json.Marshal(newDef); err != nil {
			return fmt.Errorf("encode service %q: %w", def.ID, err)
		}
	}
	cost := entryCost(newDef, reg)
	var oldCost int64
	if old != nil {
		oldCost = old.cost
	}
	// A registration that does not grow the state is taken even over the
	// budget (after loading a larger snapshot): refusing it would free
	// nothing.
	if grow := cost - oldCost; grow > 0 && s.stateBytes+grow > s.budget {
		err := &budgetError{id: def.ID, grow: grow, state: s.stateBytes, budget: s.budget}
		if !s.budgetWarned {
			// Once until a deregistration makes room: a registrant that
			// retries must not flood the log.
			s.budgetWarned = true
			s.log.Warn("registryd: registrations refused: the registry's state is at its budget (max_state_bytes)", "service", def.Name, "id", def.ID, "err", err.Error())
		}
		return err
	}

	idx := s.nextIndexLocked()
	ss := &serviceState{def: newDef, reg: reg, cost: cost, createIndex: idx, modifyIndex: idx}
	s.stateBytes += cost - oldCost
	var oldChecks map[string]*checkState
	if old != nil {
		ss.createIndex = old.createIndex
		oldChecks = make(map[string]*checkState, len(old.checks))
		for _, oc := range old.checks {
			oldChecks[oc.def.CheckID] = oc
		}
	}
	for _, cd := range want {
		oc := oldChecks[cd.CheckID]
		if oc != nil && reflect.DeepEqual(oc.def, cd) {
			// Unchanged: keep it running with its status.
			delete(oldChecks, cd.CheckID)
			oc.serviceName = def.Name
			ss.checks = append(ss.checks, oc)
			continue
		}
		status, output := cd.Status, ""
		if status == "" {
			status = statusCritical // Consul: checks start critical
			if oc != nil && oc.def.Type == cd.Type {
				// A changed definition of the same kind keeps its verdict, so
				// that re-registering does not flap the service.
				status, output = oc.status, oc.output
			}
		}
		if oc != nil {
			s.stopCheckLocked(oc)
			delete(oldChecks, cd.CheckID)
		}
		c := &checkState{def: cd, serviceID: def.ID, serviceName: def.Name,
			status: status, output: output, createIndex: idx, modifyIndex: idx}
		ss.checks = append(ss.checks, c)
		s.checks[cd.CheckID] = c
		s.startCheckLocked(c)
	}
	for _, oc := range oldChecks {
		s.stopCheckLocked(oc)
		delete(s.checks, oc.def.CheckID)
	}
	s.services[def.ID] = ss
	if old != nil && old.def.Name != def.Name {
		delete(s.names[old.def.Name].instances, def.ID)
		s.touchNameLocked(old.def.Name, idx)
	}
	ns := s.names[def.Name]
	if ns == nil {
		ns = &nameState{changed: make(chan struct{}), instances: map[string]*serviceState{}}
		s.names[def.Name] = ns
	}
	ns.instances[def.ID] = ss
	oldSvc, newSvc := serviceDef{}, newDef
	if old != nil {
		oldSvc = old.def
	}
	oldSvc.Checks, newSvc.Checks = nil, nil
	if !reflect.DeepEqual(oldSvc, newSvc) {
		s.touchCatalogLocked(idx)
	}
	s.touchNameLocked(def.Name, idx)
	if old == nil {
		s.log.Info("registryd: service registered", "service", def.Name, "id", def.ID, "address", def.Address, "port", def.Port, "checks", len(want))
	} else {
		s.log.Info("registryd: service re-registered", "service", def.Name, "id", def.ID, "address", def.Address, "port", def.Port, "checks", len(want))
	}
	return nil
}

// deregister removes the service with id and its checks.
func (s *Server) deregister(id, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return s.deregisterLocked(id, why)
}

func (s *Server) deregisterLocked(id, why string) error {
	ss := s.services[id]
	if ss == nil {
		return fmt.Errorf("%w %q", errUnknownService, id)
	}
	idx := s.nextIndexLocked()
	for _, c := range ss.checks {
		s.stopCheckLocked(c)
		delete(s.checks, c.def.CheckID)
	}
	delete(s.services, id)
	s.stateBytes -= ss.cost
	s.budgetWarned = false
	delete(s.names[ss.def.Name].instances, id)
	s.touchCatalogLocked(idx)
	s.touchNameLocked(ss.def.Name, idx)
	s.log.Info("registryd: service deregistered", "service", ss.def.Name, "id", id, "reason", why)
	return nil
}

// setStatusLocked records a check result. Only a change of status is a
// change of the registry (a new index, watchers woken, a snapshot); a new
// output with the same status is stored quietly, as Consul's agent syncs
// output-only changes lazily, so heartbeats do not wake every watcher.
func (s *Server) setStatusLocked(c *checkState, status, output string) {
	if s.closed || s.checks[c.def.CheckID] != c {
		return // removed meanwhile
	}
	output = truncateOutput(output)
	if c.status == status {
		if c.output != output {
			c.output = output
			if ns := s.names[c.serviceName]; ns != nil {
				ns.cache = nil // the output shows in health answers
			}
		}
		return
	}
	prev := c.status
	idx := s.nextIndexLocked()
	c.status, c.output, c.modifyIndex = status, output, idx
	s.armReapLocked(c)
	s.touchNameLocked(c.serviceName, idx)
	s.log.Info("registryd: check status changed", "service", c.serviceName, "id", c.serviceID, "check", c.def.CheckID, "from", prev, "to", status, "output", output)
}

// startCheckLocked starts what keeps c's status current: the runner of an
// HTTP or TCP check, the TTL timer of a TTL check, and the reaper timer if
// it starts critical.
func (s *Server) startCheckLocked(c *checkState) {
	switch c.def.Type {
	case typeTTL:
		s.armTTLLocked(c)
	case typeHTTP, typeTCP:
		if s.noProbes {
			break
		}
		ctx, cancel := context.WithCancel(s.ctx)
		c.cancel = cancel
		s.wg.Add(1)
		go s.runCheck(ctx, c)
	}
	s.armReapLocked(c)
}

// stopCheckLocked stops c's runner and timers.
func (s *Server) stopCheckLocked(c *checkState) {
	if c.cancel != nil {
		c.cancel()
	}
	if c.ttlTimer != nil {
		c.ttlTimer.Stop()
	}
	if c.reapTimer != nil {
		c.reapTimer.Stop()
	}
	c.ttlGen++
	c.reapGen++
}

// armTTLLocked (re)starts a TTL check's timer: if it is not renewed within
// TTL, the check turns critical.
func (s *Server) armTTLLocked(c *checkState) {
	if c.ttlTimer != nil {
		c.ttlTimer.Stop()
	}
	c.ttlGen++
	gen := c.ttlGen
	c.ttlTimer = s.clock.AfterFunc(time.Duration(c.def.TTL), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.ttlGen != gen {
			return
		}
		out := "TTL expired"
		if c.output != "" {
			out = "TTL expired (last output before timeout follows): " + c.output
		}
		s.setStatusLocked(c, statusCritical, out)
	})
}

// armReapLocked starts the DeregisterCriticalServiceAfter timer when c is
// critical and has one, and stops it otherwise.
func (s *Server) armReapLocked(c *checkState) {
	if c.reapTimer != nil {
		c.reapTimer.Stop()
		c.reapTimer = nil
	}
	c.reapGen++
	after := time.Duration(c.def.DeregisterCriticalServiceAfter)
	if c.status != statusCritical || after <= 0 {
		return
	}
	gen := c.reapGen
	c.reapTimer = s.clock.AfterFunc(after, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.reapGen != gen || s.closed || s.checks[c.def.CheckID] != c {
			return
		}
		s.deregisterLocked(c.serviceID, fmt.Sprintf("check %q critical for %v (DeregisterCriticalServiceAfter)", c.def.CheckID, after))
	})
}

// updateTTL handles the TTL endpoints: it renews the TTL and sets status.
func (s *Server) updateTTL(checkID, status, output string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	c := s.checks[checkID]
	if c == nil {
		return fmt.Errorf("%w %q", errUnknownCheck, checkID)
	}
	if c.def.Type != typeTTL {
		return fmt.Errorf("%w: check %q is a %s check; only TTL checks take updates", errNotTTL, checkID, c.def.Type)
	}
	s.armTTLLocked(c)
	s.setStatusLocked(c, status, output)
	return nil
}

// sortedInstances returns a name's instances ordered by ID.
func sortedInstances(ns *nameState) []*serviceState {
	out := make([]*serviceState, 0, len(ns.instances))
	for _, ss := range ns.instances {
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].def.ID < out[j].def.ID })
	return out
}

// hasTags reports whether ss carries every tag in want.
func (ss *serviceState) hasTags(want []string) bool {
	for _, w := range want {
		if !slices.Contains(ss.def.Tags, w) {
			return false
		}
	}
	return true
}

// catalogLocked is every service name with the union of its instances'
// tags (GET /v1/catalog/services).
func (s *Server) catalogLocked() map[string][]string {
	out := make(map[string][]string, len(s.names))
	for name, ns := range s.names {
		set := map[string]bool{}
		for _, ss := range ns.instances {
			for _, t := range ss.def.Tags {
				set[t] = true
			}
		}
		out[name] = slices.Sorted(maps.Keys(set))
	}
	return out
}
