package plane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
)

// rawLineSink is a process log that hands over each whole access line
// as written, however the writes cut the lines; its writes are serialised
// (the handler's and the access log encoder's, as the app's writer).
type rawLineSink struct {
	mu    sync.Mutex
	buf   []byte
	lines chan []byte
}

func (s *rawLineSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := bytes.Clone(s.buf[:i+1])
		s.buf = s.buf[i+1:]
		if bytes.Contains(line, []byte(`msg=access `)) || bytes.Contains(line, []byte(`"msg":"access"`)) {
			select {
			case s.lines <- line:
			default:
			}
		}
	}
}

func (s *rawLineSink) next(t *testing.T) []byte {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("no access log line within 5s")
		return nil
	}
}

// accessSecondsKeys and accessIntKeys are the access line's numbers: a
// duration in float seconds, and integers; the other fields are strings.
var (
	accessSecondsKeys = map[string]bool{"duration_seconds": true, "upstream_ttfb_seconds": true}
	accessIntKeys     = map[string]bool{"status": true, "attempts": true, "bytes_in": true, "bytes_out": true}
)

// handlerLine reads an access line back into its time and attributes and
// returns what slog's handler of the format writes for them.
func handlerLine(t *testing.T, format string, line []byte) []byte {
	t.Helper()
	var keys, vals []string
	if format == httpproxy.AccessLogJSON {
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("access line %q is not a JSON object", line)
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("access line %q: %v", line, err)
			}
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("access line %q: %v", line, err)
			}
			keys = append(keys, k.(string))
			switch v := v.(type) {
			case string:
				vals = append(vals, v)
			case json.Number:
				vals = append(vals, v.String())
			default:
				t.Fatalf("access line %q: %s is %#v", line, k, v)
			}
		}
	} else {
		rest := strings.TrimSuffix(string(line), "\n")
		for rest != "" {
			k, after, ok := strings.Cut(rest, "=")
			if !ok {
				t.Fatalf("access line %q: no '=' in %q", line, rest)
			}
			v := after
			if strings.HasPrefix(after, `"`) {
				q, err := strconv.QuotedPrefix(after)
				if err != nil {
					t.Fatalf("access line %q: %s: %v", line, k, err)
				}
				v, _ = strconv.Unquote(q)
				after = after[len(q):]
			} else if i := strings.IndexByte(after, ' '); i >= 0 {
				v, after = after[:i], after[i:]
			} else {
				after = ""
			}
			keys, vals = append(keys, k), append(vals, v)
			rest = strings.TrimPrefix(after, " ")
		}
	}
	if len(keys) < 3 || keys[0] != "time" || keys[1] != "level" || vals[1] != "INFO" || keys[2] != "msg" || vals[2] != "access" {
		t.Fatalf("access line %q does not begin with time, level INFO and msg access", line)
	}
	when, err := time.Parse(time.RFC3339Nano, vals[0])
	if err != nil {
		t.Fatalf("access line %q: time: %v", line, err)
	}
	r := slog.NewRecord(when, slog.LevelInfo, "access", 0)
	for i := 3; i < len(keys); i++ {
		k, v := keys[i], vals[i]
		switch {
		case accessSecondsKeys[k]:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("access line %q: %s: %v", line, k, err)
			}
			r.AddAttrs(slog.Float64(k, f))
		case accessIntKeys[k]:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("access line %q: %s: %v", line, k, err)
			}
			r.AddAttrs(slog.Int64(k, n))
		default:
			r.AddAttrs(slog.String(k, v))
		}
	}
	var out bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&out, nil)
	if format == httpproxy.AccessLogJSON {
		h = slog.NewJSONHandler(&out, nil)
	}
	h.Handle(context.Background(), r)
	return out.Bytes()
}

// TestAccessLogEncoderWritesTheHandlersLines: with the process log's
// format and writer given to the plane (as the app does), each engine's
// access lines, for requests with quotes, spaces, '=', unicode and
// invalid UTF-8 (text) or U+2028 (JSON) in their path, query and user
// agent, are byte for byte
// what slog's handler of that format writes for the same values; and
// while the log level keeps Info out, no line is written.
func TestAccessLogEncoderWritesTheHandlersLines(t *testing.T) {
	engines := []string{"goroutine"}
	if runtime.GOOS == "linux" {
		engines = append(engines, "eventloop")
	}
	be := rawBackend(t)
	dead := deadAddr(t)
	requests := []string{
		"GET /ok HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: plain/1\r\n\r\n",
		"GET /a%20b=c%22d%5C?q=%22x%20y%22&z=%E2%80%A8 HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: say \"hi\" = caf\xc3\xa9 \xff\r\n\r\n",
		"GET /caf%C3%A9/%E6%97%A5%0A HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: \r\nX-Request-Id: id with space\r\n\r\n",
		"GET /dead/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
	}
	for _, format := range []string{httpproxy.AccessLogText, httpproxy.AccessLogJSON} {
		for _, engine := range engines {
			t.Run(format+"/"+engine, func(t *testing.T) {
				sink := &rawLineSink{lines: make(chan []byte, 64)}
				var level slog.LevelVar
				ho := &slog.HandlerOptions{Level: &level}
				var h slog.Handler = slog.NewTextHandler(sink, ho)
				if format == httpproxy.AccessLogJSON {
					h = slog.NewJSONHandler(sink, ho)
				}
				srv := plane.New(slog.New(h), prometheus.NewRegistry())
				if err := srv.SetAccessLog(httpproxy.AccessLog{Format: format, Writer: sink, Level: &level}); err != nil {
					t.Fatal(err)
				}
				if err := srv.Apply(loadYAML(t, accessEngineYAML(engine, be, dead))); err != nil {
					t.Fatalf("apply: %v", err)
				}
				defer srv.Shutdown()
				c, err := net.Dial("tcp", srv.Addr("web"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				br := bufio.NewReader(c)
				send := func(req string) {
					t.Helper()
					if _, err := io.WriteString(c, req); err != nil {
						t.Fatal(err)
					}
					if _, err := readResponse(br); err != nil {
						t.Fatalf("%q: %v", req, err)
					}
				}
				level.Set(slog.LevelWarn)
				send("GET /quiet HTTP/1.1\r\nHost: api.example.com\r\n\r\n") // no line
				level.Set(slog.LevelInfo)
				for _, req := range requests {
					if format == httpproxy.AccessLogJSON {
						// JSON reads invalid UTF-8 back as U+FFFD, which is
						// written as it is: a raw U+2028 (written escaped)
						// in its place, here; proxy/httpproxy's tests hold
						// the encoder's invalid UTF-8 to the handler's.
						req = strings.ReplaceAll(req, "\xff", "\u2028")
					}
					send(req)
					line := sink.next(t)
					if bytes.Contains(line, []byte("quiet")) {
						t.Fatalf("a line was written for a request served at level WARN: %q", line)
					}
					if want := handlerLine(t, format, line); !bytes.Equal(line, want) {
						t.Errorf("for %q the access line is\n%q\nslog's handler writes for its values\n%q", req, line, want)
					}
				}
			})
		}
	}
}

// startAccessProxy starts yaml's plane with the access log on its web
// listener, its process log text to io.Discard, and the lines written by
// mode: "slog" through the logger, "encoder" by httpproxy's encoder, "off"
// not at all (access_log left off).
func startAccessProxy(t testing.TB, yaml, mode string) *plane.Plane {
	t.Helper()
	if mode != "off" {
		yaml = strings.Replace(yaml, "    listen: 127.0.0.1:0\n", "    listen: 127.0.0.1:0\n    access_log: true\n", 1)
	}
	srv := plane.New(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if mode == "encoder" {
		if err := srv.SetAccessLog(httpproxy.AccessLog{Format: httpproxy.AccessLogText, Writer: io.Discard}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := loadYAML(t, yaml)
	useTestEngine(cfg)
	if err := srv.Apply(cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// BenchmarkProxyHTTP1AccessLog is BenchmarkProxyHTTP1 with the access
// log off, on through slog's text handler, and on through the encoder:
// compare the three in one run (-count 1, repeated, interleaves them
// on a noisy machine).
func BenchmarkProxyHTTP1AccessLog(b *testing.B) {
	be := rawBackend(b)
	for _, mode := range []string{"off", "slog", "encoder"} {
		b.Run(mode, func(b *testing.B) {
			srv := startAccessProxy(b, upstreamYAML("", be), mode)
			benchGets(b, func() (net.Conn, error) { return net.Dial("tcp", srv.Addr("web")) })
		})
	}
}

// TestAccessLogEncoderAddsNoAllocation: with the access log on through
// the encoder, a proxied GET allocates no more than with it off, on the
// listener's engine (the event loop on Linux) and on the goroutine
// engine; each count is measured in the same run.
func TestAccessLogEncoderAddsNoAllocation(t *testing.T) {
	be := rawBackend(t)
	for _, engine := range []string{"default", "goroutine"} {
		yaml := upstreamYAML("", be)
		if engine == "goroutine" {
			yaml = onGoroutineEngine(yaml)
		}
		allocs := map[string]float64{}
		for _, mode := range []string{"off", "encoder"} {
			allocs[mode] = allocsPerGet(t, startAccessProxy(t, yaml, mode).Addr("web"), "/bench")
		}
		t.Logf("%s engine: allocations per proxied GET %v", engine, allocs)
		if allocs["encoder"] > allocs["off"] {
			t.Errorf("%s engine: a logged GET allocates %.2f times, one with the log off %.2f", engine, allocs["encoder"], allocs["off"])
		}
	}
}
