package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
)

// stderrSink is a process stderr that takes no lock of its own: it
// counts writes that overlap (the app must keep them apart) and hands
// over its whole lines.
type stderrSink struct {
	in, overlaps atomic.Int32
	buf          []byte // touched by one Write at a time, when writes do not overlap
	lines        chan string
}

func (s *stderrSink) Write(p []byte) (int, error) {
	if s.in.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	defer s.in.Add(-1)
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case s.lines <- string(s.buf[:i]):
		default:
		}
		s.buf = s.buf[i+1:]
	}
}

// TestAccessLogIsWrittenInTheLogFormatBesideTheProcessLog: with
// log.format json (and text), a listener's access lines reach the app's
// stderr in that format, whole lines among the process log's, which
// never overlap them in a write.
func TestAccessLogIsWrittenInTheLogFormatBesideTheProcessLog(t *testing.T) {
	backend := named(t, "b1")
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			listen := freeAddr(t)
			path := filepath.Join(t.TempDir(), "switchboard.yaml")
			writeFile(t, path, fmt.Sprintf(`admin: {enabled: false}
log: {level: info, format: %s}
listeners:
  - name: web
    listen: %s
    access_log: true
    routes:
      - {match: {path_prefix: /}, upstream: api}
upstreams:
  api:
    targets: [{address: %s}]
`, format, listen, hostport(backend)))
			sink := &stderrSink{lines: make(chan string, 1024)}
			a, err := app.New(path, app.Options{Stderr: sink})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			const n = 50
			c := &http.Client{Timeout: 10 * time.Second}
			for i := range n {
				resp, err := c.Get(fmt.Sprintf("http://%s/item/%d?q=a%%20b", listen, i))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			seen := 0
			deadline := time.After(10 * time.Second)
			for seen < n {
				var line string
				select {
				case line = <-sink.lines:
				case <-deadline:
					t.Fatalf("%d of %d access lines on stderr after 10s", seen, n)
				}
				if format == "json" {
					var m map[string]any
					if err := json.Unmarshal([]byte(line), &m); err != nil {
						t.Fatalf("stderr line %q is not JSON: %v", line, err)
					}
					if m["msg"] != "access" {
						continue
					}
					if want := fmt.Sprintf("/item/%d", seen); m["path"] != want || m["level"] != "INFO" {
						t.Fatalf("access line %d: %q, want level INFO and path %s, in order", seen, line, want)
					}
				} else {
					if !strings.HasPrefix(line, "time=") {
						t.Fatalf("stderr line %q is not a text log line", line)
					}
					if !strings.Contains(line, " msg=access ") {
						continue
					}
					if !strings.Contains(line, " level=INFO msg=access listener=web remote=127.0.0.1:") ||
						!strings.Contains(line, fmt.Sprintf(" path=/item/%d query=\"q=a%%20b\" ", seen)) {
						t.Fatalf("access line %d: %q, want level INFO, path /item/%d and the quoted query, in order", seen, line, seen)
					}
				}
				seen++
			}
			if o := sink.overlaps.Load(); o != 0 {
				t.Fatalf("%d writes to stderr overlapped another", o)
			}
		})
	}
}
