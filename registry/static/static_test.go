package static

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

func ids(in []registry.Instance) string {
	s := make([]string, len(in))
	for i, x := range in {
		s[i] = x.ID
	}
	return strings.Join(s, ",")
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestListServesInstancesByServiceAndTags(t *testing.T) {
	r, err := New([]registry.Instance{
		{ID: "o-2", Service: "orders", Address: "10.0.0.2", Port: 80, Tags: []string{"v2"}},
		{ID: "o-1", Service: "orders", Address: "10.0.0.1", Port: 80},
		{ID: "p-1", Service: "payments", Address: "10.0.0.3", Port: 80},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Second)
	got, err := r.Instances(ctx, registry.Query{Service: "orders"})
	if err != nil || ids(got) != "o-1,o-2" {
		t.Fatalf("orders = [%s], %v", ids(got), err)
	}
	got, _ = r.Instances(ctx, registry.Query{Service: "orders", Tags: []string{"v2"}})
	if ids(got) != "o-2" {
		t.Fatalf("orders with v2 = [%s]", ids(got))
	}
	got, _ = r.Instances(ctx, registry.Query{Service: "nope"})
	if got == nil || len(got) != 0 {
		t.Fatalf("unknown service = %#v; want an empty non-nil slice", got)
	}

	w, _ := r.Watch(ctx, registry.Query{Service: "orders"})
	defer w.Stop()
	if snap, err := w.Next(ctx); err != nil || ids(snap) != "o-1,o-2" {
		t.Fatalf("first Next = [%s], %v", ids(snap), err)
	}
	// Replacing payments only: no snapshot for orders. Then orders changes.
	r.Replace([]registry.Instance{
		{ID: "o-1", Service: "orders", Address: "10.0.0.1", Port: 80},
		{ID: "o-2", Service: "orders", Address: "10.0.0.2", Port: 80, Tags: []string{"v2"}},
	})
	r.Replace([]registry.Instance{{ID: "o-1", Service: "orders", Address: "10.0.0.1", Port: 80}})
	if snap, err := w.Next(ctx); err != nil || ids(snap) != "o-1" {
		t.Fatalf("Next after Replace = [%s], %v; want [o-1]", ids(snap), err)
	}
}

func TestListRejectsBadInstancesAndChangesNothing(t *testing.T) {
	if _, err := New([]registry.Instance{{ID: "a", Service: "s", Address: "h", Port: 70000}}); err == nil ||
		!strings.Contains(err.Error(), "instances[0].port: 70000 is out of range") {
		t.Fatalf("New with a bad port = %v", err)
	}
	r, _ := New([]registry.Instance{{ID: "a", Service: "s", Address: "h", Port: 1}})
	err := r.Replace([]registry.Instance{
		{ID: "a", Service: "s", Address: "h", Port: 1},
		{ID: "a", Service: "s", Address: "h2", Port: 1},
	})
	if err == nil || !strings.Contains(err.Error(), `instances[1].id: "a" repeats instances[0]`) {
		t.Fatalf("Replace with a duplicate = %v", err)
	}
	got, _ := r.Instances(context.Background(), registry.Query{Service: "s"})
	if len(got) != 1 || got[0].Address != "h" {
		t.Fatalf("after a rejected Replace: %+v; want the old list", got)
	}
}

const goodYAML = `services:
  orders:
    - {id: orders-1, address: 10.0.0.1, port: 8080, weight: 3, zone: eu-1a, tags: [v2], meta: {build: "42"}}
    - address: 10.0.0.2
      port: 8080
  payments:
    - {id: pay-1, address: 10.0.0.9, port: 9000}
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content to a temporary file and renames it over path,
// as editors and deployment tools do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func openFile(t *testing.T, content string) (*Registry, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, content)
	r, err := NewFile(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, path
}

func TestFileIsParsedWithDefaults(t *testing.T) {
	r, _ := openFile(t, goodYAML)
	got, err := r.Instances(context.Background(), registry.Query{Service: "orders"})
	if err != nil || ids(got) != "10.0.0.2:8080,orders-1" {
		t.Fatalf("orders = [%s], %v; want the id to default to address:port", ids(got), err)
	}
	o1 := got[1]
	if o1.Service != "orders" || o1.Weight != 3 || o1.Zone != "eu-1a" || o1.Meta["build"] != "42" || o1.Tags[0] != "v2" {
		t.Fatalf("orders-1 = %+v", o1)
	}
}

func TestJSONFileIsReadToo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.json")
	writeFile(t, path, "{\n\t\"services\": {\n\t\t\"orders\": [\n\t\t\t{\"id\": \"o-1\", \"address\": \"10.0.0.1\", \"port\": 80}\n\t\t]\n\t}\n}\n")
	r, err := NewFile(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, _ := r.Instances(context.Background(), registry.Query{Service: "orders"})
	if ids(got) != "o-1" {
		t.Fatalf("orders from JSON = [%s]", ids(got))
	}
}

func TestFileEditPropagatesToAWatcher(t *testing.T) {
	r, path := openFile(t, goodYAML)
	ctx := ctxFor(t, 10*time.Second)
	w, _ := r.Watch(ctx, registry.Query{Service: "orders"})
	defer w.Stop()
	if snap, err := w.Next(ctx); err != nil || ids(snap) != "10.0.0.2:8080,orders-1" {
		t.Fatalf("first Next = [%s], %v", ids(snap), err)
	}
	writeFile(t, path, "services:\n  orders:\n    - {id: orders-3, address: 10.0.0.3, port: 8080}\n")
	if snap, err := w.Next(ctx); err != nil || ids(snap) != "orders-3" {
		t.Fatalf("Next after an edit = [%s], %v; want [orders-3]", ids(snap), err)
	}
}

func TestBadEditYieldsAnErrorAndKeepsServing(t *testing.T) {
	r, path := openFile(t, goodYAML)
	ctx := ctxFor(t, 10*time.Second)
	w, _ := r.Watch(ctx, registry.Query{Service: "orders"})
	defer w.Stop()
	w.Next(ctx)

	writeFile(t, path, "services:\n  orders:\n    - {id: o-1, address: 10.0.0.1, port: 8080}\n    - id: o-2\n      address: 10.0.0.2\n      port: 70000\n")
	_, err := w.Next(ctx)
	want := path + ":6:13: services.orders[1].port: 70000 is out of range 1-65535"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Next after a bad edit = %v; want an error containing %q", err, want)
	}
	got, _ := r.Instances(ctx, registry.Query{Service: "orders"})
	if ids(got) != "10.0.0.2:8080,orders-1" {
		t.Fatalf("instances after a bad edit = [%s]; want the previous ones", ids(got))
	}
	if r.Err() == nil {
		t.Fatal("Err() = nil while the file is bad")
	}

	// Fixing the file delivers the new set, with no repeat of the error.
	writeFile(t, path, "services:\n  orders:\n    - {id: o-1, address: 10.0.0.1, port: 8080}\n")
	if snap, err := w.Next(ctx); err != nil || ids(snap) != "o-1" {
		t.Fatalf("Next after the fix = [%s], %v; want [o-1]", ids(snap), err)
	}
	if r.Err() != nil {
		t.Fatalf("Err() after the fix = %v", r.Err())
	}
}

// badEdit writes a file that does not parse and waits for the watcher to
// report it.
func badEdit(t *testing.T, w registry.Watcher, path string) {
	t.Helper()
	writeFile(t, path, "services: [\n")
	if snap, err := w.Next(ctxFor(t, 10*time.Second)); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Next after a bad edit = [%s], %v; want an error naming %s", ids(snap), err, path)
	}
}

// Regression: after a bad edit was reported, reverting the file changed no
// instance, so Next never returned and the caller's view stayed stale.
func TestWatchRevertedBadEditEndsTheError(t *testing.T) {
	r, path := openFile(t, goodYAML)
	w, _ := r.Watch(context.Background(), registry.Query{Service: "orders"})
	defer w.Stop()
	w.Next(ctxFor(t, 10*time.Second))
	badEdit(t, w, path)
	writeFile(t, path, goodYAML) // the operator reverts the edit
	if snap, err := w.Next(ctxFor(t, 5*time.Second)); err != nil || ids(snap) != "10.0.0.2:8080,orders-1" {
		t.Fatalf("Next after the revert = [%s], %v; want the unchanged [10.0.0.2:8080,orders-1]", ids(snap), err)
	}
}

// A fix that changes only other services ends the error for this query too.
func TestWatchFixChangingOnlyOtherServicesEndsTheError(t *testing.T) {
	r, path := openFile(t, goodYAML)
	w, _ := r.Watch(context.Background(), registry.Query{Service: "payments"})
	defer w.Stop()
	w.Next(ctxFor(t, 10*time.Second))
	badEdit(t, w, path)
	writeFile(t, path, strings.Replace(goodYAML, "orders-1", "orders-9", 1))
	if snap, err := w.Next(ctxFor(t, 5*time.Second)); err != nil || ids(snap) != "pay-1" {
		t.Fatalf("payments' Next after a fix that changed only orders = [%s], %v; want the unchanged [pay-1]", ids(snap), err)
	}
}

// After Next's ctx ended, the next Next returns the instances at once,
// unless the file is still bad: then it waits for a good version.
func TestWatchFirstNextAfterCtxEndedReturnsAtOnceWhileTheFileIsGood(t *testing.T) {
	r, path := openFile(t, goodYAML)
	w, _ := r.Watch(context.Background(), registry.Query{Service: "payments"})
	defer w.Stop()
	w.Next(ctxFor(t, 10*time.Second))
	short := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if snap, err := w.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next with a 50ms ctx = [%s], %v; want context.DeadlineExceeded", ids(snap), err)
		}
	}
	short()
	if snap, err := w.Next(ctxFor(t, 2*time.Second)); err != nil || ids(snap) != "pay-1" {
		t.Fatalf("first Next after the ctx error = [%s], %v; want the unchanged [pay-1] at once", ids(snap), err)
	}

	badEdit(t, w, path)
	short() // the file is still bad: no success to report
	short()
	writeFile(t, path, goodYAML)
	if snap, err := w.Next(ctxFor(t, 5*time.Second)); err != nil || ids(snap) != "pay-1" {
		t.Fatalf("Next after the fix = [%s], %v; want the unchanged [pay-1]", ids(snap), err)
	}
}

func TestRenameReplacePropagates(t *testing.T) {
	r, path := openFile(t, goodYAML)
	ctx := ctxFor(t, 10*time.Second)
	w, _ := r.Watch(ctx, registry.Query{Service: "payments"})
	defer w.Stop()
	w.Next(ctx)
	for i, content := range []string{
		"services:\n  payments:\n    - {id: pay-2, address: 10.0.0.8, port: 9000}\n",
		"services:\n  payments:\n    - {id: pay-3, address: 10.0.0.7, port: 9000}\n",
	} { // twice: the watch must survive the first replace
		replaceFile(t, path, content)
		snap, err := w.Next(ctx)
		want := []string{"pay-2", "pay-3"}[i]
		if err != nil || ids(snap) != want {
			t.Fatalf("replace %d: Next = [%s], %v; want [%s]", i, ids(snap), err, want)
		}
	}
}

func TestParseErrorsNameFileLineAndField(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"services:\n  orders: [\n", "f.yaml: yaml: line"},
		{"", "f.yaml: services: missing"},
		{"servics: {}\n", "f.yaml:1:1: servics: unknown key"},
		{"services:\n  orders:\n    - {address: a, port: x}\n", "f.yaml:3:26: services.orders[0].port: cannot unmarshal"},
		{"services:\n  orders:\n    - {address: a, port: 1, colour: red}\n", "f.yaml:3:29: services.orders[0].colour: unknown key"},
		{"services:\n  orders:\n    - {port: 1}\n", "f.yaml:3:7: services.orders[0].id: must not be empty"},
		{"services:\n  orders:\n    - {id: a, address: h, port: 1}\n    - {id: a, address: g, port: 1}\n", `f.yaml:4:7: services.orders[1].id: "a" repeats the id of the instance at line 3`},
		{"services:\n  orders: {a: 1}\n", "f.yaml:2:11: services.orders: must be a list"},
	} {
		_, err := Parse("f.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", c.src, err, c.want)
		}
	}
}

func TestNewFileFailsOnAMissingOrBadFile(t *testing.T) {
	if _, err := NewFile(filepath.Join(t.TempDir(), "nope.yaml"), quiet); err == nil {
		t.Fatal("NewFile of a missing file succeeded")
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, path, "services:\n  orders:\n    - {port: 0}\n")
	if _, err := NewFile(path, quiet); err == nil || !strings.Contains(err.Error(), path+":3:7:") {
		t.Fatalf("NewFile of a bad file = %v; want an error naming %s:3:7", err, path)
	}
}
