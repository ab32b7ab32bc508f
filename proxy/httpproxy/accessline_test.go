package httpproxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// viaHandler is the line the process log's handler (text or JSON, with
// only a level among its options) writes for l at now: what the encoder
// must write.
func viaHandler(t testing.TB, json bool, now time.Time, l *accessLine) []byte {
	var out bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	if json {
		h = slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	var w accessFields
	r := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	r.AddAttrs(l.attrs(&w)...)
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatalf("slog handler: %v", err)
	}
	return out.Bytes()
}

// viaEncoder is the line the encoder writes for l at now.
func viaEncoder(json bool, now time.Time, l *accessLine) []byte {
	e := lineEncoder{json: json}
	return e.appendAccess(nil, now, l)
}

func formatName(json bool) string {
	if json {
		return "json"
	}
	return "text"
}

// nastyStrings are values that each handler treats specially somewhere.
var nastyStrings = []string{
	"", "plain", "with space", "a=b", `say "hi"`, `back\slash`, "new\nline", "cr\rtab\t",
	"\x00\x01\x1f\x7f", "\x7f", "bad utf8 \xff\xfe", "\xc3", "naïve café", "日本語", "emoji 🎉",
	"\u2028line\u2029para", "\ufffd", "nbsp\u00a0", "zero\u200bwidth", "\u0085next", "<script>&amp;</script>",
	"'single'", "trailing ", "=", `"`, "\\", "/orders/42?x=1", "[::1]:8080", "%zz%00", "tab\tonly",
	strings.Repeat("long/", 200), "\u202e rtl", "a\x00b",
}

// sampleLine is a line with every field set; s goes into each string
// field in turn by index.
func sampleLine(s string, i int) accessLine {
	l := accessLine{
		listener: "web", remote: "127.0.0.1:50412", method: "POST", host: "api.example.com", path: "/orders",
		query: "express=yes", proto: "HTTP/1.1", userAgent: "curl/8.5.0", status: 200, route: "orders",
		upstream: "orders", endpoint: "127.0.0.1:9001", attempts: 2, took: 24100 * time.Microsecond,
		ttfb: 20300 * time.Microsecond, in: 10, out: 17, requestID: "4c1e0f5b2a9d4e7f8a6b3c2d1e0f9a8b",
	}
	fields := []*string{&l.listener, &l.remote, &l.method, &l.host, &l.path, &l.query, &l.proto, &l.userAgent,
		&l.route, &l.upstream, &l.endpoint, &l.requestID, &l.degraded, &l.traceID}
	*fields[i%len(fields)] = s
	return l
}

// TestAccessLineEncoderWritesTheHandlersBytes: for lines with awkward
// strings in every field (quotes, spaces, '=', control bytes, invalid
// UTF-8, U+2028, non-printing and space runes, empty), durations from a
// nanosecond to hours and negative, sizes at the int64 limits, and times
// in several zones and at millisecond and nanosecond edges, the encoder
// writes byte for byte what slog's TextHandler and JSONHandler write.
func TestAccessLineEncoderWritesTheHandlersBytes(t *testing.T) {
	india := time.FixedZone("IST", 5*3600+1800)
	minus := time.FixedZone("", -(3*3600 + 25*60))
	base := time.Date(2026, 12, 2, 5, 24, 45, 0, time.UTC)
	times := []time.Time{
		base, base.Add(123 * time.Millisecond), base.Add(999999999), base.Add(1), base.Add(120 * time.Microsecond),
		base.Add(100 * time.Millisecond), base.In(india).Add(5 * time.Millisecond), base.In(minus).Add(7),
		base.Local(), time.Now(), time.Date(1969, 12, 31, 23, 59, 59, 999000000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 10, india), time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC),
	}
	durations := []time.Duration{0, 1, 999, time.Microsecond, 999 * time.Nanosecond, 1234567, time.Millisecond,
		24100 * time.Microsecond, time.Second, 90 * time.Minute, 1<<63 - 1, -1, -1500 * time.Millisecond, 7 * time.Nanosecond}
	for _, json := range []bool{false, true} {
		t.Run(formatName(json), func(t *testing.T) {
			n := 0
			check := func(now time.Time, l accessLine) {
				t.Helper()
				n++
				want, got := viaHandler(t, json, now, &l), viaEncoder(json, now, &l)
				if !bytes.Equal(got, want) {
					t.Fatalf("line %d differs from slog's:\nslog:    %q\nencoder: %q", n, want, got)
				}
			}
			for i, s := range nastyStrings {
				for f := range 14 {
					check(times[(i+f)%len(times)], sampleLine(s, i*14+f))
				}
			}
			for i, d := range durations {
				l := sampleLine("", 0)
				l.listener = "web"
				l.took, l.ttfb = d, durations[(i+3)%len(durations)]
				check(times[i%len(times)], l)
			}
			for _, v := range []int64{0, -1, math.MaxInt64, math.MinInt64} {
				l := sampleLine("x", 0)
				l.in, l.out, l.status, l.attempts = v, -v, int(v), int(v>>1)
				check(base, l)
			}
			for _, now := range times {
				l := sampleLine("0af7651916cd43dd8448eb211c80319c", 13) // with a trace id
				check(now, l)
			}
		})
	}
}

// TestAccessLineEncoderReusesItsSecond: an encoder keeps the formatted
// second of its last line; the next line's time in another second, in
// another zone, or an earlier time, is formatted anew.
func TestAccessLineEncoderReusesItsSecond(t *testing.T) {
	base := time.Date(2026, 12, 2, 5, 24, 45, 0, time.UTC)
	india := time.FixedZone("IST", 5*3600+1800)
	seq := []time.Time{base, base.Add(400 * time.Millisecond), base.Add(time.Second), base.Add(time.Second).In(india),
		base.Add(-time.Hour), base.Add(-time.Hour + 999*time.Millisecond), base.Add(time.Second)}
	for _, json := range []bool{false, true} {
		e := lineEncoder{json: json}
		l := sampleLine("x", 0)
		for i, now := range seq {
			got := e.appendAccess(nil, now, &l)
			if want := viaHandler(t, json, now, &l); !bytes.Equal(got, want) {
				t.Fatalf("%s: line %d (at %v) after %v:\nslog:    %q\nencoder: %q", formatName(json), i, now, seq[max(i-1, 0)], want, got)
			}
		}
	}
}

// TestAccessLineDropReportIsTheHandlers: the "access log lines dropped"
// warning, encoded, is the handler's line for dropReport's record.
func TestAccessLineDropReportIsTheHandlers(t *testing.T) {
	now := time.Date(2026, 12, 2, 5, 24, 45, 67000000, time.UTC)
	for _, json := range []bool{false, true} {
		var out bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&out, nil)
		if json {
			h = slog.NewJSONHandler(&out, nil)
		}
		h.Handle(context.Background(), dropReport(now, "web 1", 17, 4096))
		e := lineEncoder{json: json}
		if got := e.appendDropReport(nil, now, "web 1", 17, 4096); !bytes.Equal(got, out.Bytes()) {
			t.Fatalf("%s drop report:\nslog:    %q\nencoder: %q", formatName(json), out.Bytes(), got)
		}
	}
}

// FuzzAccessLineEncoder: random strings in the line's string fields,
// random durations, sizes and times: the encoder writes what slog's
// handlers write, in both formats.
func FuzzAccessLineEncoder(f *testing.F) {
	for i, s := range nastyStrings {
		f.Add(s, nastyStrings[(i+1)%len(nastyStrings)], uint8(i), int64(i)*1234567, int64(1795000000+i), int64(i)*999, int64(i))
	}
	f.Fuzz(func(t *testing.T, a, b string, field uint8, took, sec, nsec, size int64) {
		l := sampleLine(a, int(field))
		l2 := sampleLine(b, int(field)+1)
		l.host, l.path = l2.host, l2.path // b in another field too
		l.took, l.ttfb = time.Duration(took), time.Duration(took/3)
		l.in, l.out, l.status = size, size>>7, int(size%1000)
		// A time.Now-like instant in years 0-9999 (outside them, slog's
		// time is an error).
		const span = 253402300800 // seconds from 1970 to year 10000
		const zero = -62135596800 // year 1, from 1970
		sec = zero + (sec%(span-zero)+(span-zero))%(span-zero)
		now := time.Unix(sec, (nsec%1e9+1e9)%1e9)
		if field&1 == 1 {
			now = now.In(time.FixedZone("", int(nsec%(14*3600))))
		}
		for _, json := range []bool{false, true} {
			want, got := viaHandler(t, json, now, &l), viaEncoder(json, now, &l)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s line differs from slog's:\nslog:    %q\nencoder: %q", formatName(json), want, got)
			}
		}
	})
}

// BenchmarkAccessLine is one access line, made and written to
// io.Discard: through slog (the slog.Record the loop builds, the
// attributes' allocation past its five inline ones, and the handler's
// Handle on the writer) against the encoder's (appendAccess into a
// reused buffer), in the same run.
func BenchmarkAccessLine(b *testing.B) {
	l := sampleLine("", 12) // a line without a degraded step
	ctx := context.Background()
	for _, json := range []bool{false, true} {
		var h slog.Handler = slog.NewTextHandler(io.Discard, nil)
		if json {
			h = slog.NewJSONHandler(io.Discard, nil)
		}
		b.Run(formatName(json)+"/slog", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b, processCPU())
			for b.Loop() {
				var w accessFields
				r := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
				r.AddAttrs(l.attrs(&w)...)
				h.Handle(ctx, r)
			}
		})
		b.Run(formatName(json)+"/encoder", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b, processCPU())
			e := lineEncoder{json: json}
			var line []byte
			for b.Loop() {
				line = e.appendAccess(line[:0], time.Now(), &l)
				io.Discard.Write(line)
			}
		})
	}
}

// BenchmarkAccessQueue is a loop's access line through its listener's
// queue, and its share of the writer's flush (every 256 lines, done
// here, on the benchmark's goroutine, so that ns/op is the CPU a line
// costs in all): slog's records against encoded lines, in the same run.
func BenchmarkAccessQueue(b *testing.B) {
	l := sampleLine("", 12)
	const batch = 256
	b.Run("slog", func(b *testing.B) {
		b.ReportAllocs()
		h := slog.NewTextHandler(io.Discard, nil)
		q := newAccessQueue("web", slog.New(h), batch, time.Hour)
		defer q.close()
		defer reportCPU(b, processCPU())
		ctx := context.Background()
		n := 0
		for b.Loop() {
			var w accessFields
			r := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
			r.AddAttrs(l.attrs(&w)...)
			q.add(r)
			if n++; n == batch {
				q.writeQueued(ctx, h)
				n = 0
			}
		}
	})
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		out, _ := newAccessOutput(AccessLog{Format: AccessLogText, Writer: io.Discard})
		q := startAccessQueue("web", nil, out, batch, time.Hour)
		defer q.close()
		defer reportCPU(b, processCPU())
		n := 0
		for b.Loop() {
			q.addLine(time.Now(), &l)
			if n++; n == batch {
				q.writeEncoded()
				n = 0
			}
		}
	})
}
