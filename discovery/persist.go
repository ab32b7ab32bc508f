package discovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/internal/atomicfile"
	"github.com/switchboard-dev/switchboard/registry"
)

// cacheFormat is the version of the cache file layout; a file of another
// version is ignored.
const cacheFormat = 1

// maxCacheFile bounds what load reads: 100,000 instances of ~600 bytes
// each. A bigger file is not ours, or is damaged.
const maxCacheFile = 64 << 20

// cacheFile is the on-disk form of one query's last good view.
type cacheFile struct {
	Format   int    `json:"format"`
	Registry string `json:"registry"`
	Query    string `json:"query"`
	Service  string `json:"service"`
	// SavedAt is when the registry gave this view.
	SavedAt   time.Time           `json:"saved_at"`
	Instances []registry.Instance `json:"instances"`
}

// persister writes cache files from one goroutine, so that a slow disk
// never holds up a watch loop; a query that changes faster than the disk
// writes only its latest view.
type persister struct {
	dir      string
	registry string
	log      *slog.Logger

	mu      sync.Mutex
	pending map[string]*cacheFile // by file path
	kick    chan struct{}         // capacity 1: "pending is not empty"
	cancel  context.CancelFunc
	done    chan struct{}
}

func newPersister(dir, registryName string, log *slog.Logger) (*persister, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Temporary files a crash left behind: only ours (by registry prefix),
	// since other registries may share the directory, and only old ones,
	// since a Discovery being replaced (a reload) may be writing one now.
	if old, err := filepath.Glob(filepath.Join(dir, ".tmp-"+escapeName(registryName, 40)+"-*")); err == nil {
		for _, f := range old {
			if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) > time.Minute {
				os.Remove(f)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &persister{
		dir:      dir,
		registry: registryName,
		log:      log,
		pending:  map[string]*cacheFile{},
		kick:     make(chan struct{}, 1),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	go p.run(ctx)
	return p, nil
}

// path names the cache file of a query: readable parts for the operator
// (registry, service), escaped, and a hash of the exact registry and key, so
// that no two queries share a file and no name escapes the directory.
func (p *persister) path(key, service string) string {
	sum := sha256.Sum256([]byte(p.registry + "\x00" + key))
	name := escapeName(p.registry, 40) + "-" + escapeName(service, 60) + "-" + hex.EncodeToString(sum[:8]) + ".json"
	return filepath.Join(p.dir, name)
}

// escapeName keeps [A-Za-z0-9._-] and replaces every other byte with '_',
// cut to max bytes.
func escapeName(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < max; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// store queues the view of key for writing.
func (p *persister) store(key string, q registry.Query, at time.Time, insts []registry.Instance) {
	f := &cacheFile{Format: cacheFormat, Registry: p.registry, Query: key, Service: q.Service, SavedAt: at, Instances: insts}
	p.mu.Lock()
	p.pending[p.path(key, q.Service)] = f
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *persister) run(ctx context.Context) {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
			p.flush()
		case <-ctx.Done():
			p.flush()
			return
		}
	}
}

// close writes what is pending and stops the writer.
func (p *persister) close() {
	p.cancel()
	<-p.done
}

func (p *persister) flush() {
	p.mu.Lock()
	batch := p.pending
	p.pending = map[string]*cacheFile{}
	p.mu.Unlock()
	for path, f := range batch {
		if err := writeAtomic(path, f); err != nil {
			p.log.Error("discovery: writing the cache file", "file", path, "query", f.Query, "error", err)
		}
	}
}

// writeAtomic replaces path with f (atomicfile.Write). Its temporary
// files are named .tmp-<file name>-*, which newPersister cleans up.
func writeAtomic(path string, f *cacheFile) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, ".tmp-"+strings.TrimSuffix(filepath.Base(path), ".json")+"-*", data)
}

// load reads the cached view of key. A missing file is no view; a damaged
// one is logged and ignored.
func (p *persister) load(key, service string) (*cacheFile, bool) {
	path := p.path(key, service)
	f, err := readCacheFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("discovery: ignoring the cache file", "file", path, "query", key, "error", err)
		}
		return nil, false
	}
	switch {
	case f.Registry != p.registry:
		err = fmt.Errorf("registry: %s, want %s", f.Registry, p.registry)
	case f.Query != key:
		err = fmt.Errorf("query: %s, want %s", f.Query, key)
	}
	if err != nil {
		p.log.Warn("discovery: ignoring the cache file", "file", path, "query", key, "error", err)
		return nil, false
	}
	return f, true
}

func readCacheFile(path string) (*cacheFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err == nil && fi.Size() > maxCacheFile {
		return nil, fmt.Errorf("larger than %d bytes", maxCacheFile)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxCacheFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxCacheFile {
		return nil, fmt.Errorf("larger than %d bytes", maxCacheFile)
	}
	var f cacheFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decoding: data after the JSON object")
	}
	if f.Format != cacheFormat {
		return nil, fmt.Errorf("format: %d, want %d", f.Format, cacheFormat)
	}
	if f.Instances == nil {
		f.Instances = []registry.Instance{}
	}
	for i, in := range f.Instances {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("instances[%d]: %w", i, err)
		}
	}
	return &f, nil
}
