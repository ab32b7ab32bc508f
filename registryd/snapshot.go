package registryd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

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

// The snapshot file is written line by line: a header line, one line per
// service instance, and a closing line:
//
//	{"version":1,"max_state_bytes":67108864,"index":7,"catalog_index":7,"name_indexes":{"orders":7},"services":[
//	{"registration":{...},"create_index":5,"modify_index":7,"checks":[{"check_id":"service:o1","status":"passing","output":"","create_index":5,"modify_index":7}]},
//	...
//	]}
//
// Each registration is stored as encoded when it was registered
// (serviceState.reg), so a write copies bytes rather than encoding the
// registry again. It is a JSON document like any other: the reader is
// encoding/json, and snapshots written before this layout (indented, no
// max_state_bytes) load too.
//
// Every instance is charged its entryCost, an upper bound of what its line
// and its name's entry in name_indexes can take; the state's size is the
// sum (Server.stateBytes), and the budget (Config.MaxStateBytes) bounds it.
// So a snapshot is never larger than the state's size plus
// snapshotOverhead (the header and closing lines at their widest), and a
// snapshot records the bound its state was kept under: New reads up to
// readLimit of it, and whatever a registry accepted loads again, also
// into a registry started with a smaller budget.

// outputReserve is what each check is charged for its output: the output
// as it appears between the quotes of the snapshot, at most. Outputs are
// capped at maxOutput bytes plus a note of what was cut (truncateOutput);
// an output whose JSON encoding is longer (quotes, control characters) is
// cut to fit in the snapshot.
const outputReserve = maxOutput + 64

// legacySnapshotLimit is what New reads of a snapshot that records no
// bound (written before max_state_bytes existed): the limit those
// versions had.
const legacySnapshotLimit = 256 << 20

// snapshotFile is the on-disk state, as read. Registrations are stored in
// the very form PUT /v1/agent/service/register accepts and are decoded by
// the same validating decoder on load, so a snapshot can never hold what
// the API would refuse.
type snapshotFile struct {
	Version int `json:"version"`
	// MaxStateBytes is the bound the state was kept under when the
	// snapshot was written: the writer's budget, or its state's size if
	// that was larger (a registry that loaded a bigger snapshot). Absent
	// (0) in snapshots of earlier versions.
	MaxStateBytes int64             `json:"max_state_bytes"`
	Index         uint64            `json:"index"`
	CatalogIndex  uint64            `json:"catalog_index"`
	NameIndexes   map[string]uint64 `json:"name_indexes"`
	Services      []snapshotService `json:"services"`
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

// snapshotState is a copy of what a snapshot holds, taken under the state
// lock and encoded after it is released. Registrations are shared, not
// copied: serviceState.reg is never modified.
type snapshotState struct {
	maxStateBytes int64
	index         uint64
	catalogIndex  uint64
	nameIndexes   map[string]uint64
	services      []snapshotEntry
}

type snapshotEntry struct {
	id                       string
	reg                      []byte
	createIndex, modifyIndex uint64
	checks                   []snapshotCheck
}

// appendJSON appends v encoded; v is a string or a map of strings to
// indexes, which always encode.
func appendJSON(b []byte, v any) []byte {
	enc, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("registryd: encoding %T: %v", v, err))
	}
	return append(b, enc...)
}

// appendOutput appends a check's output as a JSON string whose content
// (between the quotes) is at most outputReserve bytes: whole runes are
// dropped from the end until it fits.
func appendOutput(b []byte, s string) []byte {
	enc, _ := json.Marshal(s)
	if len(enc)-2 <= outputReserve {
		return append(b, enc...)
	}
	n, cut := 0, 0
	for cut < len(s) {
		_, size := utf8.DecodeRuneInString(s[cut:])
		r, _ := json.Marshal(s[cut : cut+size]) // runes encode independently
		if n+len(r)-2 > outputReserve {
			break
		}
		n += len(r) - 2
		cut += size
	}
	return appendJSON(b, s[:cut])
}

// appendEntry appends one instance's line (without its separator).
func appendEntry(b, reg []byte, createIndex, modifyIndex uint64, checks []snapshotCheck) []byte {
	b = append(b, `{"registration":`...)
	b = append(b, reg...)
	b = append(b, `,"create_index":`...)
	b = strconv.AppendUint(b, createIndex, 10)
	b = append(b, `,"modify_index":`...)
	b = strconv.AppendUint(b, modifyIndex, 10)
	if len(checks) > 0 {
		b = append(b, `,"checks":[`...)
		for i, c := range checks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"check_id":`...)
			b = appendJSON(b, c.CheckID)
			b = append(b, `,"status":`...)
			b = appendJSON(b, c.Status)
			b = append(b, `,"output":`...)
			b = appendOutput(b, c.Output)
			b = append(b, `,"create_index":`...)
			b = strconv.AppendUint(b, c.CreateIndex, 10)
			b = append(b, `,"modify_index":`...)
			b = strconv.AppendUint(b, c.ModifyIndex, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendHeader and appendFooter frame the instances' lines.
func appendHeader(b []byte, maxStateBytes int64, index, catalogIndex uint64, nameIndexes map[string]uint64) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, snapshotVersion, 10)
	b = append(b, `,"max_state_bytes":`...)
	b = strconv.AppendInt(b, maxStateBytes, 10)
	b = append(b, `,"index":`...)
	b = strconv.AppendUint(b, index, 10)
	b = append(b, `,"catalog_index":`...)
	b = strconv.AppendUint(b, catalogIndex, 10)
	b = append(b, `,"name_indexes":`...)
	b = appendJSON(b, nameIndexes)
	return append(b, `,"services":[`...)
}

func appendFooter(b []byte) []byte { return append(b, "\n]}\n"...) }

// entrySeparator precedes every instance's line.
const entrySeparator = ",\n"

// snapshotOverhead is what a snapshot takes beyond its instances' costs:
// the header (without name_indexes, which entryCost charges) and the
// closing line, with every number at its widest.
var snapshotOverhead = int64(len(appendFooter(appendHeader(nil, math.MaxInt64, math.MaxUint64, math.MaxUint64, map[string]uint64{}))))

// entryCost is the most that an instance registered as def, encoded as
// reg, can take in a snapshot: its line and separator with every index at
// its widest, the longest status and outputReserve bytes of output for
// each check, and an entry for its name in name_indexes.
func entryCost(def serviceDef, reg []byte) int64 {
	checks := make([]snapshotCheck, len(def.Checks))
	for i, c := range def.Checks {
		checks[i] = snapshotCheck{CheckID: c.CheckID, Status: statusCritical, CreateIndex: math.MaxUint64, ModifyIndex: math.MaxUint64}
	}
	n := len(appendEntry(nil, nil, math.MaxUint64, math.MaxUint64, checks)) + len(reg) + len(checks)*outputReserve + len(entrySeparator)
	// name_indexes: "name":index, (the braces are in snapshotOverhead)
	n += len(appendJSON(nil, def.Name)) + len(":,") + len(strconv.FormatUint(math.MaxUint64, 10))
	return int64(n)
}

// readLimit is the largest snapshot of a state kept within bound bytes.
func readLimit(bound int64) int64 { return bound + snapshotOverhead }

// persistLocked notes that the state changed; the persister writes it soon.
func (s *Server) persistLocked() {
	s.dirty = true
	if !s.persist {
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

// copyStateLocked copies what the snapshot holds: indexes, statuses and
// outputs, and the registrations' encodings, which are shared.
func (s *Server) copyStateLocked() *snapshotState {
	st := &snapshotState{
		maxStateBytes: max(s.budget, s.stateBytes),
		index:         s.index,
		catalogIndex:  s.catalogIndex,
		nameIndexes:   make(map[string]uint64, len(s.names)),
		services:      make([]snapshotEntry, 0, len(s.services)),
	}
	for name, ns := range s.names {
		st.nameIndexes[name] = ns.index
	}
	for id, ss := range s.services {
		e := snapshotEntry{id: id, reg: ss.reg, createIndex: ss.createIndex, modifyIndex: ss.modifyIndex,
			checks: make([]snapshotCheck, len(ss.checks))}
		for i, c := range ss.checks {
			e.checks[i] = snapshotCheck{CheckID: c.def.CheckID, Status: c.status, Output: c.output,
				CreateIndex: c.createIndex, ModifyIndex: c.modifyIndex}
		}
		st.services = append(st.services, e)
	}
	return st
}

// encode is the snapshot file of st, instances ordered by ID.
func (st *snapshotState) encode() []byte {
	sort.Slice(st.services, func(i, j int) bool { return st.services[i].id < st.services[j].id })
	size := 0
	for _, e := range st.services {
		size += len(e.reg) + 256
	}
	b := make([]byte, 0, size+1024)
	b = appendHeader(b, st.maxStateBytes, st.index, st.catalogIndex, st.nameIndexes)
	for i, e := range st.services {
		if i == 0 {
			b = append(b, '\n')
		} else {
			b = append(b, entrySeparator...)
		}
		b = appendEntry(b, e.reg, e.createIndex, e.modifyIndex, e.checks)
	}
	return appendFooter(b)
}

// writeSnapshot writes the state if it changed since the last write:
// to a temporary file, fsynced, renamed over the snapshot, and the
// directory fsynced, so a crash leaves either the old or the new snapshot.
// Only the copy of the state is made under the state lock; the encoding
// (the whole registry: up to the budget's size) and the write happen
// after it is released, so reads and writes of the registry do not wait
// for them. writeMu keeps snapshots in order.
func (s *Server) writeSnapshot() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	st := s.copyStateLocked()
	s.dirty = false
	s.mu.Unlock()
	if s.snapshotEncodeHook != nil {
		s.snapshotEncodeHook()
	}
	b := st.encode()
	err := atomicfile.Write(filepath.Join(s.cfg.DataDir, snapshotName), "."+snapshotName+".tmp-*", b)
	if err != nil {
		s.mu.Lock()
		s.dirty = true // try again with the next change, or at Close
		s.mu.Unlock()
		return fmt.Errorf("registryd: write snapshot: %w", err)
	}
	return nil
}

// loadSnapshot creates DataDir if needed and loads its snapshot, if any.
// A snapshot that cannot be loaded — unreadable, corrupt, invalid, of
// another version, too big — never keeps the registry from starting: it
// is logged as an error, moved aside (setAside) and the registry starts
// empty. Only a DataDir that cannot be created is an error.
func (s *Server) loadSnapshot() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(s.cfg.DataDir, snapshotName)
	b, err := s.readSnapshot(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		s.setAside(path, fmt.Errorf("load snapshot: %w", err))
		return nil
	}
	if err := s.restore(b); err != nil {
		s.setAside(path, fmt.Errorf("load snapshot %s: corrupt: %w", path, err))
		return nil
	}
	s.log.Info("registryd: snapshot loaded", "path", path, "services", len(s.services), "index", s.index, "state_bytes", s.stateBytes, "max_state_bytes", s.budget)
	if s.stateBytes > s.budget {
		s.log.Warn("registryd: the loaded registry is larger than max_state_bytes: it is kept, and registrations that would grow it are refused (507) until deregistrations bring it below the budget",
			"path", path, "state_bytes", s.stateBytes, "max_state_bytes", s.budget)
	}
	return nil
}

// setAside moves the snapshot at path, which could not be loaded for why,
// to path.unreadable-<UTC time> (-2, -3, ... if that is taken: an earlier
// one is never replaced), so that it is kept for whoever wants to recover
// it and the registry can start empty. If it cannot be moved, the
// registry starts empty without persistence, rather than overwrite it.
func (s *Server) setAside(path string, why error) {
	aside, err := moveAside(path, path+".unreadable-"+s.clock.Now().UTC().Format("20060102T150405Z"))
	if err != nil {
		s.persist = false
		s.log.Error("registryd: snapshot cannot be loaded, nor moved aside: starting with an empty registry that is NOT persisted (its snapshot would replace the file); move the file away and restart",
			"path", path, "err", why.Error(), "move_err", err.Error())
		return
	}
	s.log.Error("registryd: snapshot cannot be loaded: moved aside, starting with an empty registry; services must register again",
		"path", path, "moved_to", aside, "err", why.Error())
}

// renameFile is os.Rename; a variable so that a test can make it fail
// (root, who runs the tests, is not stopped by permissions).
var renameFile = os.Rename

// moveAside renames path to name, or to name-2, name-3, ... when name is
// taken.
func moveAside(path, name string) (string, error) {
	for i := 1; i <= 1000; i++ {
		to := name
		if i > 1 {
			to = fmt.Sprintf("%s-%d", name, i)
		}
		if _, err := os.Lstat(to); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if err := renameFile(path, to); err != nil {
			return "", err
		}
		return to, nil
	}
	return "", fmt.Errorf("%s and 999 numbered variants exist", name)
}

// readSnapshot reads the snapshot at path, up to readLimit of the larger
// of this registry's budget and the bound the snapshot records (at most
// MaxMaxStateBytes), so that a snapshot written under a larger budget
// loads too.
func (s *Server) readSnapshot(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a snapshot file", path)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	limit := readLimit(s.budget)
	if st.Size() > limit {
		bound, ok := recordedBound(f)
		switch {
		case !ok:
			limit = max(limit, legacySnapshotLimit)
		case bound > MaxMaxStateBytes:
			return nil, fmt.Errorf("%s records a max_state_bytes of %d, more than any registry may have (%d)", path, bound, int64(MaxMaxStateBytes))
		default:
			limit = max(limit, readLimit(bound))
		}
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a snapshot of a state within max_state_bytes %d may have", path, st.Size(), limit, limit-snapshotOverhead)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}

// recordedBound reads max_state_bytes from the header of the snapshot f,
// reading no more than the first few fields.
func recordedBound(f *os.File) (int64, bool) {
	dec := json.NewDecoder(io.NewSectionReader(f, 0, 4096))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, false
	}
	for range 2 { // version, then max_state_bytes
		key, err := dec.Token()
		if err != nil {
			return 0, false
		}
		var n int64
		if err := dec.Decode(&n); err != nil {
			return 0, false
		}
		if key == "max_state_bytes" {
			return n, n > 0
		}
	}
	return 0, false
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
	var stateBytes int64
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
		reg, err := json.Marshal(def)
		if err != nil {
			return fmt.Errorf("services[%d]: encode: %w", i, err)
		}
		ss := &serviceState{def: def, reg: reg, cost: entryCost(def, reg), createIndex: sv.CreateIndex, modifyIndex: sv.ModifyIndex}
		stateBytes += ss.cost
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
	s.stateBytes = stateBytes
	for _, c := range checks {
		s.startCheckLocked(c) // TTLs count from now: a restart is a grace period of one TTL
	}
	return nil
}
