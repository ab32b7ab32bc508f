package h1loop

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// chunkedPrefix is the response head netHTTPChunked puts before a body.
const chunkedPrefix = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

// netHTTPChunked reads b as a chunked response body the way the
// goroutine engine's client does (http.ReadResponse on a 4 KiB buffered
// reader, the body read to its end, which reads the trailer too). It
// returns how many bytes of b the body took, or ok false when net/http
// refuses it (or b ends first).
func netHTTPChunked(b []byte) (n int, ok bool) {
	r := bytes.NewReader(append([]byte(chunkedPrefix), b...))
	br := bufio.NewReaderSize(r, 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		panic(err) // the head is ours
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, false
	}
	return int(r.Size()) - r.Len() - br.Buffered() - len(chunkedPrefix), true
}

// scanAll runs a fresh scanner over b, fed in pieces of step bytes (0:
// all at once), as the loop feeds it what each read returns. It returns
// where the body ended (or the error was found), whether it ended, and
// the error.
func scanAll(b []byte, step int) (n int, done bool, err error) {
	var s chunkScanner
	if step <= 0 {
		step = len(b)
	}
	for off := 0; off < len(b) || off == 0; off += step {
		k, d, e := s.scan(b[off:min(off+step, len(b))])
		if d || e != nil || off+step >= len(b) {
			return off + k, d, e
		}
	}
	return 0, false, nil
}

// maxChunkFuzz bounds the fuzzer's input below net/http's size limits on
// chunked bodies, which the scanner does not apply: a chunk-size line of
// 4 KiB or more, a trailer longer than the client's 4 KiB read buffer,
// more than 16 KiB of framing beyond the data. They are limits on what a
// reader buffers, not framing: the scanner holds nothing (the bytes go on
// to the client as they came), so it has no use for them.
const maxChunkFuzz = 4000

// FuzzChunkScannerAgreesWithNetHTTP feeds the same bytes to chunkScanner
// (once whole, once in pieces of step bytes, so that the state carried
// from one call to the next is exercised) and to net/http's chunked body
// reader, the one the goroutine engine relays upstream bodies with. The
// scanner may be stricter than net/http, never more lenient, and never
// ends a body elsewhere:
//
//   - wherever it is cut, the scanner finds the same end (or the same
//     error);
//   - when it says the body ends after n bytes, net/http reads exactly
//     those n bytes as a whole body, its trailer included;
//   - when net/http reads a whole body from the input, the scanner ends
//     it at the same byte or refuses it.
//
// Where the scanner is stricter (it refuses, net/http reads the body):
// a trailer field line that is not a token name, a colon and a value of
// field-value bytes (no obs-fold, no space before the colon, no bare CR),
// and a line of the trailer section ended by a bare LF, which net/http
// takes when a CRLF CRLF comes anywhere later in its buffer; a chunk size
// of 16 hex digits.
//
//	go test -run '^$' -fuzz=FuzzChunkScannerAgreesWithNetHTTP -fuzztime=3m -parallel=1 ./proxy/h1loop
func FuzzChunkScannerAgreesWithNetHTTP(f *testing.F) {
	for _, s := range []struct {
		in   string
		step uint16
	}{
		{"5\r\nhello\r\n0\r\n\r\n", 0},
		{"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", 1},
		{"5;ext=1;q=\"a b\"\r\nhello\r\n0\r\nX-Sum: 5\r\nY:\r\n\r\nnext", 3},
		{"5 \t\r\nhello\r\n0\r\n\r\n", 2},
		{"5 ;x\r\nhello\r\n0\r\n\r\n", 0},
		{"5 x\r\nhello\r\n0\r\n\r\n", 0},
		{"5\nhello\r\n0\r\n\r\n", 0},
		{"5\r\nhello\n0\r\n\r\n", 0},
		{"5\r\nhelloXX0\r\n\r\n", 0},
		{"5;a\nb\r\nhello\r\n0\r\n\r\n", 0},
		{"5;a\rb\r\nhello\r\n0\r\n\r\n", 0},
		{"0\r\n\n", 0},
		{"0\r\nX: 1\n\nGET / HTTP/1.1\r\n\r\n", 0},
		{"0\r\nX: 1\r\r\n\r\n", 0},
		{"0\r\n\r\r\n\r\n", 0},
		{"0\r\nX\r\n\r\n", 0},
		{"0\r\nX : 1\r\n\r\n", 0},
		{"0\r\n X: 1\r\n\r\n", 0},
		{"0\r\nX: 1\r\n 2\r\n\r\n", 4},
		{"0\r\nX: a\x00b\r\n\r\n", 0},
		{"0\r\nX: caf\xc3\xa9\r\n\r\n", 5},
		{"fffffffffffffff\r\nabc", 0},
		{"ffffffffffffffff\r\nabc", 0},
		{"00000000000000005\r\nhello\r\n0\r\n\r\n", 0},
		{"-1\r\n", 0},
		{"0x5\r\nhello\r\n0\r\n\r\n", 0},
		{"+5\r\nhello\r\n0\r\n\r\n", 0},
		{"\r\n", 0},
		{"5\r\nhello\r\n", 1},
		{"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n", 7},
		{"0;ext\r\nTrailer-A: x\r\nTrailer-B: y\r\n\r\n0\r\n\r\n", 2},
	} {
		f.Add([]byte(s.in), s.step)
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint16) {
		if len(in) > maxChunkFuzz {
			return
		}
		n, done, err := scanAll(in, 0)
		if pn, pdone, perr := scanAll(in, int(step)); pn != n || pdone != done || (perr == nil) != (err == nil) {
			t.Fatalf("fed whole the scanner stops at %d done=%v err=%v; in pieces of %d at %d done=%v err=%v:\n%q",
				n, done, err, step, pn, pdone, perr, in)
		}
		if done {
			if m, ok := netHTTPChunked(in[:n]); !ok || m != n {
				t.Fatalf("the scanner ends the body after %d bytes, net/http reads them as: whole %v, %d bytes:\n%q", n, ok, m, in)
			}
		}
		if m, ok := netHTTPChunked(in); ok && err == nil && (!done || n != m) {
			t.Fatalf("net/http ends the body after %d bytes, the scanner: done=%v at %d:\n%q", m, done, n, in)
		}
	})
}

// TestChunkScannerRefusesFramingNetHTTPRefuses pins the framing the
// scanner once took and net/http's chunked reader refuses (found by
// FuzzChunkScannerAgreesWithNetHTTP): relayed as it came, it would reach
// the client as framing the goroutine engine never lets through, which a
// client's parser may read another way (a trailer line ended by a bare LF
// or cut by a bare CR, where the next response's head follows).
func TestChunkScannerRefusesFramingNetHTTPRefuses(t *testing.T) {
	for _, bad := range []string{
		"5 ;x\r\nhello\r\n0\r\n\r\n",       // white space, then an extension
		"5 x\r\nhello\r\n0\r\n\r\n",        // white space, then anything
		"0\r\n\n",                          // the empty line ended by a bare LF
		"0\r\nX: 1\n\nHTTP/1.1 200 OK\r\n", // a field line ended by a bare LF
		"0\r\nX: 1\r\r\n\r\n",              // a bare CR
		"0\r\n\r\r\n\r\n",                  // a bare CR on the empty line
		"0\r\nX\r\n\r\n",                   // no colon
		"0\r\n X: 1\r\n\r\n",               // a leading space
		"0\r\nX: a\x00b\r\n\r\n",           // a control character
	} {
		if _, ok := netHTTPChunked([]byte(bad)); ok {
			t.Fatalf("%q: net/http takes it; the case pins nothing", bad)
		}
		if n, done, err := scanAll([]byte(bad), 0); err == nil {
			t.Errorf("%q: the scanner takes it (done=%v at %d), net/http refuses it", bad, done, n)
		}
	}
}
