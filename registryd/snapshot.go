package registryd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/switchboard-dev/switchboard/internal/atomicfile"
	"github.com/switchboard-dev/switchboard/internal/clock"
)

// snapshotName is the snapshot's file name inside Config.DataDir.
const snapshotName = "registry.json"

// snapshotVersion is the format version this code writes and reads.
const snapshotVersion = 1

// persistEvery coalesces snapshot writes: after a write, changes wait this
// long, so a burst of registrations costs one write rather than hundreds.
const persistEvery = 100 * time.Millisecond

// A failed snapshot write is retried on its own, without waiting for the
// next change: after snapshotRetryMin, doubling up to snapshotRetryMax
// while it keeps failing (a full or read-only disk may be fixed at any
// time, and a quiet registry might otherwise not try again until Close).
const (
	snapshotRetryMin = time.Second
	snapshotRetryMax = time.Minute
)

// nextRetry is the wait after a failed write, given the previous one (0
// after a success).
func nextRetry(prev, lo, hi time.Duration) time.Duration {
	if prev <= 0 {
		return lo
	}
	return min(2*prev, hi)
}

// maxSnapshotBytes bounds what New reads: maxServices registrations of
// maximal size would not fit, but real ones do many times over.
const maxSnapshotBytes = 256 << 20

// snapshotFile is the on-disk state. Registrations are stored in the very
// form PUT /v1/agent/service/register accepts and are decoded by the same
// validating decoder on load, so a snapshot can never hold what the API
// would refuse.
type snapshotFile struct {
	Version      int               `json:"version"`
	Index        uint64            `json:"index"`
	CatalogIndex uint64            `json:"catalog_index"`
	NameIndexes  map[string]uint64 `json:"name_indexes"`
	Services     []snapshotService `json:"services"`
}

type snapshotService struct {
	Registration json.RawMessage `json:"registration"`
	CreateIndex  uint64          `json:"create_index"`
	ModifyIndex  uint64          `json:"modify_index"`
	Checks       []snapshotCheck `json:"checks,omitempty"`
}

type snapshotCheck struct {
	CheckID     string `json:"check_id"`
	Status      string `json:"status"`
	Output      string `json:"output,omitempty"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// persistLocked notes that the state changed; the persister writes it soon.
func (s *Server) persistLocked() {
	s.dirty = true
	if s.cfg.DataDir == "" {
		return
	}
	select {
	case s.persistCh <- struct{}{}:
	default: // a write is already due
	}
}

// persister writes snapshots after changes, at most one per persistEvery,
// until the server closes (Close writes the last one). After a failed
// write it retries with backoff (see snapshotRetryMin); changes meanwhile
// stay dirty and go into the retry, so a broken disk costs one attempt
// per backoff step, not one per change.
func (s *Server) persister() {
	defer s.wg.Done()
	var (
		backoff  time.Duration
		failures int
		retry    *time.Timer
		retryC   <-chan time.Time // nil unless a retry is due
		changes  = s.persistCh    // nil while waiting to retry
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-changes:
		case <-retryC:
		}
		err := s.writeSnapshot()
		if err != nil {
			failures++
			backoff = nextRetry(backoff, s.snapshotRetryMin, s.snapshotRetryMax)
			s.log.Error("registryd: snapshot not written; registrations since the last snapshot would be lost on restart", "err", err, "retry_in", backoff, "failures", failures)
			if retry == nil {
				retry = time.NewTimer(backoff)
			} else {
				retry.Reset(backoff)
			}
			retryC, changes = retry.C, nil
		} else {
			if failures > 0 {
				s.log.Info("registryd: snapshot written after failed attempts", "failures", failures)
			}
			failures, backoff = 0, 0
			retryC, changes = nil, s.persistCh
		}
		if s.snapshotHook != nil {
			s.snapshotHook(err)
		}
		if clock.Sleep(s.ctx, persistEvery) != nil {
			return
		}
	}
}

func (s *Server) snapshotLocked() ([]byte, error) {
	f := snapshotFile{
		Version:      snapshotVersion,
		Index:        s.index,
		CatalogIndex: s.catalogIndex,
		NameIndexes:  make(map[string]uint64, len(s.names)),
	}
	for name, ns := range s.names {
		f.NameIndexes[name] = ns.index
	}
	ids := make([]string, 0, len(s.services))
	for id := range s.services {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ss := s.services[id]
		reg, err := json.Marshal(ss.def)
		if err != nil {
			return nil, fmt.Errorf("encode service %q: %w", id, err)
		}
		sv := snapshotService{Registration: reg, CreateIndex: ss.createIndex, ModifyIndex: ss.modifyIndex}
		for _, c := range ss.checks {
			sv.Checks = append(sv.Checks, snapshotCheck{CheckID: c.def.CheckID, Status: c.status, Output: c.output,
				CreateIndex: c.createIndex, ModifyIndex: c.modifyIndex})
		}
		f.Services = append(f.Services, sv)
	}
	return json.MarshalIndent(f, "", " ")
}

// writeSnapshot writes the state if it changed since the last write:
// to a temporary file, fsynced, renamed over the snapshot, and the
// directory fsynced, so a crash leaves either the old or the new snapshot.
func (s *Server) writeSnapshot() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	b, err := s.snapshotLocked()
	s.dirty = false
	s.mu.Unlock()
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.cfg.DataDir, snapshotName), "."+snapshotName+".tmp-*", b)
	}
	if err != nil {
		s.mu.Lock()
		s.dirty = true // try again with the next change, or at Close
		s.mu.Unlock()
		return fmt.Errorf("registryd: write snapshot: %w", err)
	}
	return nil
}

// loadSnapshot creates DataDir if needed and loads its snapshot, if any.
func (s *Server) loadSnapshot() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(s.cfg.DataDir, snapshotName)
	b, err := readLimited(path, maxSnapshotBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load snapshot: %w", err)
	}
	if err := s.restore(b); err != nil {
		return fmt.Errorf("load snapshot %s: corrupt: %w (move it away to start empty)", path, err)
	}
	s.log.Info("registryd: snapshot loaded", "path", path, "services", len(s.services), "index", s.index)
	return nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a snapshot may have", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}

// restore replaces the (empty) state with the snapshot b, validating every
// part; on error nothing is kept.
func (s *Server) restore(b []byte) error {
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	if f.Version != snapshotVersion {
		return fmt.Errorf("version %d, this build reads version %d", f.Version, snapshotVersion)
	}
	if f.Index < 1 || f.CatalogIndex < 1 || f.CatalogIndex > f.Index {
		return fmt.Errorf("indexes: index %d, catalog_index %d are not 1 <= catalog_index <= index", f.Index, f.CatalogIndex)
	}
	services := map[string]*serviceState{}
	checks := map[string]*checkState{}
	names := map[string]*nameState{}
	for i, sv := range f.Services {
		def, err := decodeService(sv.Registration)
		if err != nil {
			return fmt.Errorf("services[%d]: %w", i, err)
		}
		if services[def.ID] != nil {
			return fmt.Errorf("services[%d]: service ID %q appears twice", i, def.ID)
		}
		if sv.CreateIndex < 1 || sv.CreateIndex > sv.ModifyIndex || sv.ModifyIndex > f.Index {
			return fmt.Errorf("services[%d]: indexes %d/%d out of order (index %d)", i, sv.CreateIndex, sv.ModifyIndex, f.Index)
		}
		if len(sv.Checks) != len(def.Checks) {
			return fmt.Errorf("services[%d]: %d check states for %d checks", i, len(sv.Checks), len(def.Checks))
		}
		ss := &serviceState{def: def, createIndex: sv.CreateIndex, modifyIndex: sv.ModifyIndex}
		for j, cs := range sv.Checks {
			cd := def.Checks[j]
			switch {
			case cs.CheckID != cd.CheckID:
				return fmt.Errorf("services[%d].checks[%d]: check_id %q, registration says %q", i, j, cs.CheckID, cd.CheckID)
			case checks[cd.CheckID] != nil:
				return fmt.Errorf("services[%d].checks[%d]: check ID %q appears twice", i, j, cd.CheckID)
			case cs.Status != statusPassing && cs.Status != statusWarning && cs.Status != statusCritical:
				return fmt.Errorf("services[%d].checks[%d]: status %q is not passing, warning or critical", i, j, cs.Status)
			case cs.CreateIndex < 1 || cs.CreateIndex > cs.ModifyIndex || cs.ModifyIndex > f.Index:
				return fmt.Errorf("services[%d].checks[%d]: indexes %d/%d out of order (index %d)", i, j, cs.CreateIndex, cs.ModifyIndex, f.Index)
			}
			c := &checkState{def: cd, serviceID: def.ID, serviceName: def.Name, status: cs.Status,
				output: truncateOutput(cs.Output), createIndex: cs.CreateIndex, modifyIndex: cs.ModifyIndex}
			checks[cd.CheckID] = c
			ss.checks = append(ss.checks, c)
		}
		services[def.ID] = ss
		ns := names[def.Name]
		if ns == nil {
			idx := f.NameIndexes[def.Name]
			if idx < 1 || idx > f.Index {
				return fmt.Errorf("name_indexes: %q has index %d, want 1..%d", def.Name, idx, f.Index)
			}
			ns = &nameState{index: idx, changed: make(chan struct{}), instances: map[string]*serviceState{}}
			names[def.Name] = ns
		}
		ns.instances[def.ID] = ss
	}
	if len(services) > maxServices {
		return fmt.Errorf("%d services, more than the limit %d", len(services), maxServices)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index, s.catalogIndex = f.Index, f.CatalogIndex
	s.services, s.checks, s.names = services, checks, names
	for _, c := range checks {
		s.startCheckLocked(c) // TTLs count from now: a restart is a grace period of one TTL
	}
	return nil
}
