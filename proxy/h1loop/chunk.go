package h1loop

import (
	"errors"

	"golang.org/x/net/http/httpguts"
)

// chunkScanner finds the end of a chunked body (RFC 9112 7.1) in the
// bytes that pass through it, which go on as they came: the loop relays
// an upstream's chunked body to an HTTP/1.1 client without re-framing it,
// and needs only to know where it ends (after the last chunk and the
// trailer section) so that the connection can serve the next exchange.
//
// It takes no framing net/http's chunked reader refuses (the goroutine
// engine reads upstream bodies with it), because the bytes go on to the
// client unchanged: a line ending that is not CRLF, a size line with
// anything but white space after the size and before a chunk extension,
// and a trailer line that is not a field line (a token, a colon, a value
// of field-value bytes) are errors (FuzzChunkScannerAgreesWithNetHTTP).
type chunkScanner struct {
	state  uint8
	size   int64 // the chunk's size, then what is left of its data
	digits int
}

const (
	chSize         = iota // the chunk size's hex digits
	chSizeOWS             // white space after the size, up to CR
	chExt                 // chunk extensions up to CR
	chSizeLF              // the LF ending the size line
	chData                // the chunk's data
	chDataCR              // the CR after the data
	chDataLF              // the LF after the data
	chTrailer             // the start of a trailer line, or of the empty one
	chTrailerName         // a trailer field's name, up to its colon
	chTrailerValue        // a trailer field's value, up to CR
	chTrailerLF           // the LF ending a trailer field line
	chEndLF               // the LF ending the empty line: the body's last byte
	chDone
)

var errBadChunk = errors.New("h1loop: malformed chunked response body")

// scan takes b, the next bytes of the body. It returns how many of them
// belong to the body (all, unless it ended within b), whether the body
// ended, and an error for bytes that are not chunked framing: the body is
// then cut there.
func (s *chunkScanner) scan(b []byte) (n int, done bool, err error) {
	for n < len(b) {
		c := b[n]
		switch s.state {
		case chSize:
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
				if s.digits == 15 {
					return n, false, errBadChunk
				}
				s.size = s.size<<4 | int64(hexVal(c))
				s.digits++
			case s.digits > 0 && c == ';':
				s.state = chExt
			case s.digits > 0 && (c == ' ' || c == '\t'):
				s.state = chSizeOWS
			case s.digits > 0 && c == '\r':
				s.state = chSizeLF
			default:
				return n, false, errBadChunk
			}
			n++
		case chSizeOWS:
			// net/http trims white space at the end of the size line,
			// then cuts it at the first ';': a size followed by white
			// space and then anything else is refused.
			switch c {
			case ' ', '\t':
			case '\r':
				s.state = chSizeLF
			default:
				return n, false, errBadChunk
			}
			n++
		case chExt:
			switch c {
			case '\r':
				s.state = chSizeLF
			case '\n':
				return n, false, errBadChunk // a bare LF, which net/http refuses
			}
			n++
		case chSizeLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			s.endSizeLine()
			n++
		case chData:
			k := int(min(int64(len(b)-n), s.size))
			s.size -= int64(k)
			n += k
			if s.size == 0 {
				s.state = chDataCR
			}
		case chDataCR:
			if c != '\r' {
				return n, false, errBadChunk
			}
			s.state = chDataLF
			n++
		case chDataLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			s.state = chSize
			n++
		case chTrailer:
			switch {
			case c == '\r':
				s.state = chEndLF
			case httpguts.IsTokenRune(rune(c)):
				s.state = chTrailerName
			default:
				return n, false, errBadChunk
			}
			n++
		case chTrailerName:
			switch {
			case c == ':':
				s.state = chTrailerValue
			case !httpguts.IsTokenRune(rune(c)):
				return n, false, errBadChunk
			}
			n++
		case chTrailerValue:
			switch {
			case c == '\r':
				s.state = chTrailerLF
			case c < ' ' && c != '\t' || c == 0x7f:
				return n, false, errBadChunk
			}
			n++
		case chTrailerLF, chEndLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			n++
			if s.state == chEndLF {
				s.state = chDone
				return n, true, nil
			}
			s.state = chTrailer
		case chDone:
			return n, true, nil
		}
	}
	return n, s.state == chDone, nil
}

func (s *chunkScanner) endSizeLine() {
	if s.size == 0 {
		s.state = chTrailer
	} else {
		s.state = chData
	}
	s.digits = 0
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
