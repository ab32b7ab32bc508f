package h1loop

import "errors"

// chunkScanner finds the end of a chunked body (RFC 9112 7.1) in the
// bytes that pass through it, which go on as they came: the loop relays
// an upstream's chunked body to an HTTP/1.1 client without re-framing it,
// and needs only to know where it ends (after the last chunk and the
// trailer section) so that the connection can serve the next exchange.
type chunkScanner struct {
	state   uint8
	size    int64 // the chunk's size, then what is left of its data
	digits  int
	lineLen int // trailer lines: bytes of the current line before CR/LF
}

const (
	chSize    = iota // the chunk size's hex digits
	chExt            // chunk extensions up to CR
	chSizeLF         // the LF ending the size line
	chData           // the chunk's data
	chDataCR         // the CR after the data
	chDataLF         // the LF after the data
	chTrailer        // trailer lines, up to an empty one
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
			case s.digits > 0 && (c == ';' || c == ' ' || c == '\t'):
				s.state = chExt
			case s.digits > 0 && c == '\r':
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
			n++
			switch c {
			case '\n':
				if s.lineLen == 0 {
					s.state = chDone
					return n, true, nil
				}
				s.lineLen = 0
			case '\r':
			default:
				s.lineLen++
			}
		case chDone:
			return n, true, nil
		}
	}
	return n, s.state == chDone, nil
}

func (s *chunkScanner) endSizeLine() {
	if s.size == 0 {
		s.state, s.lineLen = chTrailer, 0
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
