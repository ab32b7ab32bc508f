package app_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	consul "github.com/hashicorp/consul/api"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/endpoint/endpointtest"
)

// Issue 16, bug 1: a registry snapshot that cannot be loaded (here one
// bigger than any registry may write) never keeps `switchboard serve`
// down. It starts, logs the problem as an error naming the file, moves
// the file aside, and its embedded registry takes registrations that the
// load balancer routes to.
func TestUnloadableRegistrySnapshotDoesNotKeepServeDown(t *testing.T) {
	dataDir := t.TempDir()
	snapshot := filepath.Join(dataDir, "registry.json")
	huge := `{"version":1,"max_state_bytes":65536,"index":1,"catalog_index":1,"name_indexes":{},"services":[]` + strings.Repeat(" ", 1<<20) + "}"
	if err := os.WriteFile(snapshot, []byte(huge), 0o600); err != nil {
		t.Fatal(err)
	}
	api := named(t, "api")
	listen := freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	writeFile(t, path, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
registry: {listen: 127.0.0.1:0, data_dir: %s, max_state_bytes: 64KiB}
listeners:
  - name: web
    listen: %s
    routes: [{match: {path_prefix: /api}, upstream: api}]
upstreams:
  api:
    discovery: {registry: embedded, service: api}
`, dataDir, listen))
	var mu sync.Mutex
	var logs bytes.Buffer
	a, err := app.New(path, app.Options{Stderr: writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	})})
	if err != nil {
		t.Fatalf("serve with an unloadable registry snapshot: %v; want it to start", err)
	}
	t.Cleanup(func() { a.Shutdown() })

	mu.Lock()
	log := logs.String()
	mu.Unlock()
	var line string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "snapshot cannot be loaded") {
			line = l
		}
	}
	aside, _ := filepath.Glob(snapshot + ".unreadable-*")
	if len(aside) != 1 {
		t.Fatalf("snapshot set aside as %v, want one registry.json.unreadable-<time>\nlog:\n%s", aside, log)
	}
	for _, want := range []string{snapshot, aside[0], "more than", "empty registry"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error logged does not say %q:\n%s", want, log)
		}
	}

	c, err := consul.NewClient(&consul.Config{Address: a.RegistryAddr()})
	if err != nil {
		t.Fatal(err)
	}
	h, p := splitPort(t, hostport(api))
	if err := c.Agent().ServiceRegister(&consul.AgentServiceRegistration{ID: "api-1", Name: "api", Address: h, Port: p,
		Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing}}); err != nil {
		t.Fatalf("register with the embedded registry: %v", err)
	}
	endpointtest.WaitReady(t, pool(t, a, "api"), 1)
	if n, last := failures("http://"+listen+"/api", 5); n != 0 {
		t.Fatalf("%d of 5 requests failed through the registry-fed upstream (last: %s)", n, last)
	}
}
