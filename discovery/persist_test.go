package discovery

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

// cacheFiles lists the files in dir, failing on leftovers of a write.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("temporary file %s left in the cache directory", e.Name())
		}
		names = append(names, e.Name())
	}
	return names
}

// The restart-during-outage case: a switchboard that saw the registry's
// answer is restarted while the registry is down, serves what it last knew
// (stale, from cache), and converges when the registry comes back.
func TestCachedViewSurvivesARestartDuringARegistryOutage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	q := registry.Query{Service: "orders", Tags: []string{"v2"}, PassingOnly: true}
	set := []registry.Instance{
		{ID: "a", Service: "orders", Address: "10.0.0.1", Port: 9001, Tags: []string{"v2"}, Weight: 3, Zone: "eu-1", Meta: map[string]string{"zone": "eu-1"}},
		{ID: "b", Service: "orders", Address: "10.0.0.2", Port: 9001, Tags: []string{"v2"}},
	}

	// First life: the registry answers; Close writes the view.
	first := newHarness(t, func(o *Options) { o.CacheDir = dir })
	v := first.d.Watch(q)
	first.step(t, "orders", answer{insts: set})
	savedAt := first.clock.Now()
	v.Close()
	first.d.Close()
	files := cacheFiles(t, dir)
	if len(files) != 1 || !strings.HasPrefix(files[0], "test-orders-") || !strings.HasSuffix(files[0], ".json") {
		t.Fatalf("cache files %v: want one test-orders-<hash>.json", files)
	}

	// Second life: the registry is down.
	second := newHarness(t, func(o *Options) { o.CacheDir = dir })
	second.clock.Advance(time.Hour)
	v = second.d.Watch(q)
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := v.Ready(ctx); err != nil {
		t.Fatalf("Ready with a cached view: %v", err)
	}
	rec, cancelRec := record(v)
	defer cancelRec()
	s := rec.next(t)
	if !s.FromCache || !s.Stale || !s.UpdatedAt.IsZero() || s.Version != 1 {
		t.Fatalf("cached snapshot %+v: want v1, from cache, stale, zero UpdatedAt", s)
	}
	if !slices.EqualFunc(s.Instances, set, sameInstance) {
		t.Fatalf("cached instances %+v, want %+v", s.Instances, set)
	}
	st := second.status(t, "orders")
	if !st.FromCache || !st.Stale || st.AgeSeconds != time.Hour.Seconds() {
		t.Fatalf("status %+v: want from cache, stale, age 1h (since the view was saved at %v)", st, savedAt)
	}
	if second.logs.count("serving the cached view") != 1 {
		t.Fatalf("serving from cache was not logged:\n%s", second.logs)
	}

	// Still down: the cached view stays, no new snapshot.
	second.step(t, "orders", answer{err: errors.New("connection refused")})
	<-second.sleeps
	rec.none(t)
	if st := second.status(t, "orders"); st.AgeSeconds != time.Hour.Seconds() || st.LastError != "connection refused" {
		t.Fatalf("status while still down %+v: want age 1h and the error", st)
	}

	// The registry is back, with one instance fewer.
	second.step(t, "orders", answer{insts: set[1:]})
	s = rec.next(t)
	if s.FromCache || s.Stale || s.Version != 2 || !slices.Equal(ids(s.Instances), []string{"b"}) {
		t.Fatalf("after the registry came back: %+v; want v2, fresh, [b]", s)
	}
	second.d.Close()
	f, err := readCacheFile(filepath.Join(dir, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(f.Instances), []string{"b"}) || !f.SavedAt.Equal(second.clock.Now()) {
		t.Fatalf("cache file after convergence: %+v; want [b] saved now", f)
	}
	cacheFiles(t, dir)
}

func TestTheRegistryAnswerReplacesAnEqualCachedViewWithoutRewritingIt(t *testing.T) {
	dir := t.TempDir()
	q := registry.Query{Service: "orders"}
	set := []registry.Instance{inst("orders", "a", 1)}
	first := newHarness(t, func(o *Options) { o.CacheDir = dir })
	first.d.Watch(q)
	first.step(t, "orders", answer{insts: set})
	first.d.Close()
	path := filepath.Join(dir, cacheFiles(t, dir)[0])
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	second := newHarness(t, func(o *Options) { o.CacheDir = dir })
	v := second.d.Watch(q)
	rec, cancel := record(v)
	defer cancel()
	if s := rec.next(t); !s.FromCache {
		t.Fatalf("first snapshot %+v, want from cache", s)
	}
	second.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "a", 1)}})
	if s := rec.next(t); s.FromCache || s.Stale || s.Version != 2 {
		t.Fatalf("registry confirms the cached set: %+v; want v2 fresh", s)
	}
	second.d.Close()
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the cache file was rewritten although the view did not change")
	}
}

func TestCorruptCacheFilesAreLoggedAndIgnored(t *testing.T) {
	q := registry.Query{Service: "orders"}
	for _, tc := range []struct {
		name, content, want string
	}{
		{"garbage", "{not json", "decoding"},
		{"truncated", `{"format":1,"registry":"test","query":"orders","instances":[{"id":"a"`, "decoding"},
		{"other format", `{"format":2,"registry":"test","query":"orders","instances":[]}`, "format: 2"},
		{"bad instance", `{"format":1,"registry":"test","query":"orders","instances":[{"id":"a","service":"orders","address":"h","port":0}]}`, "instances[0]: port"},
		{"other query", `{"format":1,"registry":"test","query":"payments","instances":[]}`, "query: payments, want orders"},
		{"trailing data", `{"format":1,"registry":"test","query":"orders","instances":[]} {}`, "after the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := newHarness(t, func(o *Options) { o.CacheDir = dir })
			path := h.d.cache.path(q.Key(), q.Service)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			v := h.d.Watch(q)
			defer v.Close()
			h.step(t, "orders", answer{insts: []registry.Instance{inst("orders", "live", 1)}})
			s := v.Snapshot()
			if s.Version != 1 || s.FromCache || !slices.Equal(ids(s.Instances), []string{"live"}) {
				t.Fatalf("first snapshot %+v: want v1 from the registry only", s)
			}
			logs := h.logs.String()
			if !strings.Contains(logs, "ignoring the cache file") || !strings.Contains(logs, tc.want) {
				t.Fatalf("log does not report the bad file with %q:\n%s", tc.want, logs)
			}
		})
	}
}

func TestCacheFileTooLargeIsIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(maxCacheFile + 1); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if _, err := readCacheFile(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("readCacheFile of a %d-byte file: %v, want a size error", maxCacheFile+1, err)
	}
}

// writeAtomic renames a new file over the old one: a reader that opened the
// old file still reads it whole, and the path never holds a partial file.
func TestWriteAtomicReplacesTheFileByRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.json")
	old := &cacheFile{Format: cacheFormat, Registry: "r", Query: "q", Instances: []registry.Instance{inst("q", "old", 1)}}
	if err := writeAtomic(path, old); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	next := &cacheFile{Format: cacheFormat, Registry: "r", Query: "q", Instances: []registry.Instance{inst("q", "new", 1)}}
	if err := writeAtomic(path, next); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(reader)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"old"`) {
		t.Fatalf("the old file's reader sees %s: the file was rewritten in place", data)
	}
	f, err := readCacheFile(path)
	if err != nil || f.Instances[0].ID != "new" {
		t.Fatalf("after the write: %+v, %v", f, err)
	}
	cacheFiles(t, dir)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestCacheFileNamesAreSafeAndDistinct(t *testing.T) {
	p := &persister{dir: "/cache", registry: "../etc"}
	seen := map[string]string{}
	for _, key := range []string{"orders", "orders,v2", "orders;passing", "../../passwd", "a/b", "ünïcode", strings.Repeat("x", 500)} {
		path := p.path(key, strings.Split(key, ",")[0])
		if filepath.Dir(path) != "/cache" {
			t.Errorf("key %q: path %s escapes the cache directory", key, path)
		}
		if len(filepath.Base(path)) > 160 {
			t.Errorf("key %q: file name of %d bytes", key, len(filepath.Base(path)))
		}
		if other, dup := seen[path]; dup {
			t.Errorf("keys %q and %q share %s", key, other, path)
		}
		seen[path] = key
	}
}

func TestNewFailsWhenTheCacheDirCannotBeCreated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(newFakeRegistry(), Options{CacheDir: filepath.Join(file, "sub")})
	if err == nil || !strings.Contains(err.Error(), "cache_dir") {
		t.Fatalf("New with a cache_dir under a file: %v, want an error naming cache_dir", err)
	}
}

func TestOnlyOldTemporaryFilesOfTheSameRegistryAreCleanedUp(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, ".tmp-test-orders-abc-123")
	fresh := filepath.Join(dir, ".tmp-test-orders-abc-456")
	other := filepath.Join(dir, ".tmp-etcd-orders-abc-789")
	for _, f := range []string{old, fresh, other} {
		if err := os.WriteFile(f, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	for _, f := range []string{old, other} {
		if err := os.Chtimes(f, long, long); err != nil {
			t.Fatal(err)
		}
	}
	newHarness(t, func(o *Options) { o.CacheDir = dir })
	for f, want := range map[string]bool{old: false, fresh: true, other: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(f), err == nil, want)
		}
	}
}
