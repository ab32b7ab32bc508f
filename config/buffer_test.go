package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBufferRequestsAndReadBodyGetTheirDefaults(t *testing.T) {
	cfg := mustParse(t, `
listeners:
  - name: web
    listen: :8080
    routes:
      - {upstream: u, buffer_requests: {}}
      - {upstream: u, buffer_requests: {memory: 1KiB, dir: `+t.TempDir()+`}}
      - {upstream: u}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	l := cfg.Listeners[0]
	if l.Timeouts.ReadBody != Duration(30*time.Second) {
		t.Errorf("timeouts.read_body = %v, want 30s by default", l.Timeouts.ReadBody.Std())
	}
	if b := l.Routes[0].BufferRequests; b == nil || b.Memory != 64*KiB || b.Max != 8*MiB || b.Dir != "" {
		t.Errorf("buffer_requests: {} = %+v, want memory 64KiB, max 8MiB, the default dir", b)
	}
	if b := l.Routes[1].BufferRequests; b.Memory != KiB || b.Max != 8*MiB {
		t.Errorf("buffer_requests {memory: 1KiB} = %+v, want max defaulted to 8MiB", b)
	}
	if l.Routes[2].BufferRequests != nil {
		t.Errorf("a route without buffer_requests buffers: %+v", l.Routes[2].BufferRequests)
	}
}

func TestBufferRequestsProblemsPointAtTheKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lines := problemLines(t, "lb.yaml", `listeners:
  - name: web
    listen: :8080
    routes:
      - upstream: u
        buffer_requests: {memory: 2MiB, max: 1MiB}
      - upstream: u
        buffer_requests: {memory: 16MiB}
      - upstream: u
        buffer_requests: {dir: /no/such/dir}
      - upstream: u
        buffer_requests: {dir: `+file+`}
      - upstream: u
        buffer_requests: {max: -1}
  - name: db
    protocol: tcp
    listen: :5432
    upstream: u
    timeouts: {read_body: 5s}
upstreams:
  u: {targets: [{address: "a:1"}]}
`)
	checkLines(t, lines, []string{
		`lb.yaml:6:35: buffer_requests.memory (2097152 bytes) is more than buffer_requests.max (1048576 bytes), the largest body buffered`,
		`lb.yaml:8:35: buffer_requests.memory (16777216 bytes) is more than buffer_requests.max (8388608 bytes), the largest body buffered`,
		`lb.yaml:10:32: buffer_requests.dir "/no/such/dir": no such file or directory`,
		`lb.yaml:12:32: buffer_requests.dir "` + file + `" is not a directory`,
		`lb.yaml:14:32: size must not be negative, got "-1"`,
		`lb.yaml:19:16: timeouts.read_body is for http listeners; a tcp listener does not read request bodies (timeouts.idle closes silent connections)`,
	})
}
