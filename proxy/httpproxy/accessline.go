package httpproxy

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// AccessLog has a Server write its listeners' access log lines itself,
// with an encoder made for that one line, instead of through the Server's
// *slog.Logger: the bytes are the same as those the logger's handler
// writes for the line, at a fraction of the cost (no slog.Record, no
// per-attribute formatting through slog's general machinery, and on the
// event-loop engine one write of many lines per flush instead of one per
// line). It describes that handler, which must be what Format names,
// made with no HandlerOptions but Level: no ReplaceAttr, no AddSource, no
// WithAttrs or WithGroup. A Server without one writes through its logger,
// whatever handler that has.
type AccessLog struct {
	// Format is the process log's handler: AccessLogText for
	// slog.NewTextHandler, AccessLogJSON for slog.NewJSONHandler.
	Format string
	// Writer is where that handler writes. Access lines are written to it
	// from other goroutines than the handler's writes (the event-loop
	// listeners' writers, the goroutine engine's requests), so it must
	// keep whole writes apart: an *os.File does; anything else needs a
	// lock that the handler's writes take too (wrap the writer once and
	// give the handler and the Server the wrapper).
	Writer io.Writer
	// Level is the handler's HandlerOptions.Level: lines are made only
	// while it lets Info through. Nil: Info (slog's default).
	Level slog.Leveler
}

// The formats of AccessLog.
const (
	// AccessLogText: the line as slog.NewTextHandler writes it.
	AccessLogText = "text"
	// AccessLogJSON: the line as slog.NewJSONHandler writes it.
	AccessLogJSON = "json"
)

// accessOutput is a validated AccessLog: what a listener's queue and its
// goroutine engine write access lines through.
type accessOutput struct {
	json  bool
	w     io.Writer
	level slog.Leveler
	// mu holds enc, the goroutine engine's encoder, and its buffer for the
	// time of a line's encoding and write. (The handler holds its lock
	// for the write too; a sync.Pool of encoders would cost allocations
	// whenever it drops one, as under -race.)
	mu  sync.Mutex
	enc lineEncoder
}

// newAccessOutput checks al and returns its output; the zero AccessLog
// returns nil (the logger's path).
func newAccessOutput(al AccessLog) (*accessOutput, error) {
	if al.Format == "" && al.Writer == nil && al.Level == nil {
		return nil, nil
	}
	o := &accessOutput{w: al.Writer, level: al.Level}
	switch al.Format {
	case AccessLogText:
	case AccessLogJSON:
		o.json = true
	default:
		return nil, fmt.Errorf("access log: format %q: want %q or %q", al.Format, AccessLogText, AccessLogJSON)
	}
	if al.Writer == nil {
		return nil, fmt.Errorf("access log: format %q has no writer", al.Format)
	}
	if o.level == nil {
		o.level = slog.LevelInfo
	}
	o.enc.json = o.json
	return o, nil
}

// enabled reports whether an access line would be written, as the
// handler's Enabled for Info would.
func (o *accessOutput) enabled() bool {
	return slog.LevelInfo >= o.level.Level()
}

// write writes the line of l at time now, at once, in one Write (as the
// handler does): the goroutine engine's way.
func (o *accessOutput) write(now time.Time, l *accessLine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := &o.enc
	e.buf = e.appendAccess(e.buf[:0], now, l)
	o.w.Write(e.buf)
	if cap(e.buf) > maxKeptLine {
		e.buf = nil
	}
}

// maxKeptLine is the largest buffer the goroutine engine's encoder keeps
// for the next line: one that a huge path or user agent grew goes.
const maxKeptLine = 4 << 10

// lineEncoder writes log lines exactly as slog's TextHandler (json false)
// or JSONHandler (json true) write a Record of the same time, level,
// message and attributes, for the kinds of values an access line has:
// strings, integers, and durations as float seconds. Keys are written as
// they are; they must be plain identifiers that neither handler quotes or
// escapes. An encoder keeps the formatted second of the last time it
// wrote; it is not safe for concurrent use.
type lineEncoder struct {
	json bool
	buf  []byte // the goroutine engine's line; the queue's are the queue's
	// fields takes a line's attributes; the encoder's own, so that the
	// array it has for the logger's path costs no clearing per line.
	fields accessFields

	// The last second formatted: its Unix time and location, and the
	// text of its date and time of day ("2006-01-02T15:04:05") and of its
	// zone ("Z", "+01:00").
	sec   int64
	loc   *time.Location
	clock []byte
	zone  []byte
}

// appendAccess appends the access line of l, logged at now, to b.
func (e *lineEncoder) appendAccess(b []byte, now time.Time, l *accessLine) []byte {
	w := e.start(b, now, slog.LevelInfo, "access")
	l.fields(w)
	return w.end()
}

// start begins a line of the given time, level and message, appended to
// b; the attributes follow through the returned accessFields, and its end
// returns the line.
func (e *lineEncoder) start(b []byte, t time.Time, level slog.Level, msg string) *accessFields {
	w := &e.fields
	w.e, w.b = e, e.begin(b, t, level, msg)
	return w
}

// begin appends what a handler writes before the attributes: the time,
// level and message.
func (e *lineEncoder) begin(b []byte, t time.Time, level slog.Level, msg string) []byte {
	if e.json {
		b = append(b, `{"time":"`...)
		b = e.appendTime(b, t)
		b = append(b, `","level":`...)
		b = appendJSONString(b, level.String())
		b = append(b, `,"msg":`...)
		return appendJSONString(b, msg)
	}
	b = append(b, "time="...)
	b = e.appendTime(b, t)
	b = append(b, " level="...)
	b = appendTextString(b, level.String())
	b = append(b, " msg="...)
	return appendTextString(b, msg)
}

// appendTime appends t as the handler writes a record's time: RFC 3339
// with milliseconds, always three digits (text), or with nanoseconds,
// trailing zeros and a bare point dropped (JSON: time.RFC3339Nano).
// Both take the clock from the time's location, as time.Now gives it.
func (e *lineEncoder) appendTime(b []byte, t time.Time) []byte {
	sec := t.Unix()
	if sec != e.sec || t.Location() != e.loc || e.clock == nil {
		// A new second: format it once; the lines within it reuse it.
		e.clock = t.AppendFormat(e.clock[:0], "2006-01-02T15:04:05")
		e.zone = t.AppendFormat(e.zone[:0], "Z07:00")
		e.sec, e.loc = sec, t.Location()
	}
	b = append(b, e.clock...)
	ns := t.Nanosecond()
	if !e.json {
		ms := ns / 1e6
		b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	} else if ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := len(frac)
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, e.zone...)
}

// accessFields takes a line's attributes: appended to b by e (after
// lineEncoder.start), or, with e nil, to attrs, as the slog.Attrs a
// handler is given (then attrs[:n] are the line's). One type for both,
// not an interface, and an array of its own, not a slice of the caller's:
// the attributes then cost no allocation whichever way they go (escape
// analysis would move whatever a *accessFields points to to the heap).
type accessFields struct {
	e     *lineEncoder
	b     []byte
	attrs [20]slog.Attr
	n     int
}

// attr adds a to the attributes.
func (w *accessFields) attr(a slog.Attr) {
	w.attrs[w.n] = a
	w.n++
}

// key appends the separator and key k.
func (w *accessFields) key(k string) {
	if w.e.json {
		w.b = append(w.b, ',', '"')
		w.b = append(w.b, k...)
		w.b = append(w.b, '"', ':')
		return
	}
	w.b = append(w.b, ' ')
	w.b = append(w.b, k...)
	w.b = append(w.b, '=')
}

func (w *accessFields) str(k, v string) {
	switch {
	case w.e == nil:
		w.attr(slog.String(k, v))
	case w.e.json:
		w.key(k)
		w.b = appendJSONString(w.b, v)
	default:
		w.key(k)
		w.b = appendTextString(w.b, v)
	}
}

func (w *accessFields) int(k string, v int64) {
	if w.e == nil {
		w.attr(slog.Int64(k, v))
		return
	}
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

// seconds takes d as slog.Float64(k, d.Seconds()).
func (w *accessFields) seconds(k string, d time.Duration) {
	switch {
	case w.e == nil:
		w.attr(slog.Float64(k, d.Seconds()))
	case w.e.json:
		w.key(k)
		w.b = appendJSONFloat(w.b, d.Seconds())
	default:
		w.key(k)
		w.b = strconv.AppendFloat(w.b, d.Seconds(), 'g', -1, 64)
	}
}

// end closes the encoded line and returns it.
func (w *accessFields) end() []byte {
	b := w.b
	w.b = nil
	if w.e.json {
		return append(b, '}', '\n')
	}
	return append(b, '\n')
}

// appendTextString appends s as TextHandler writes a string: as it is,
// unless it is empty or holds a byte or rune that would make the line
// ambiguous or unreadable (then Go-quoted, strconv.Quote).
func appendTextString(b []byte, s string) []byte {
	if s == "" {
		return append(b, '"', '"')
	}
	if textNeedsQuotes(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// textNeedsQuotes reports whether TextHandler quotes s: empty; an ASCII
// space, '=', '"' or control character below 0x20 (a backslash or DEL
// does not count); a rune that is invalid UTF-8 or U+FFFD, a Unicode
// space, or not printable.
func textNeedsQuotes(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if textPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return true
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += n
	}
	return false
}

// textPlain and jsonPlain hold true for the ASCII bytes that a text
// value leaves unquoted (but for an empty one), and that a JSON string
// holds unescaped; false for all other bytes, which the functions look at
// more closely.
var textPlain, jsonPlain = func() (text, json [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		text[c] = c != ' ' && c != '=' && c != '"'
		json[c] = c != '"' && c != '\\'
	}
	return
}()

const lowerHex = "0123456789abcdef"

// appendJSONString appends s in quotes as JSONHandler writes a string:
// '"' and '\\' escaped by a backslash, \n \r \t as such, other control
// characters as \u00XX, each byte of invalid UTF-8 as \ufffd, U+2028 and
// U+2029 as \u2028 and \u2029; '<', '>' and '&' are not escaped (the
// handler's encoder has HTML escaping off).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is yet to be appended, unchanged
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONFloat appends f as JSONHandler writes a float64 (it is
// encoding/json's number): the shortest decimal that reads back as f,
// without an exponent between 1e-6 and 1e21, with one ("1e-7", "1e+21")
// outside. f is finite: a duration's seconds.
func appendJSONFloat(b []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
		// strconv writes at least two exponent digits: e-07 is e-7.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
		return b
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}
