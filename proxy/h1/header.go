package h1

import (
	"bufio"
	"bytes"
	"io"
)

// The standard library's parsers (http.ReadRequest, http.ReadResponse)
// normalise what they read, and some of what they drop matters to a
// proxy: a request's Content-Length when it also says Transfer-Encoding,
// Transfer-Encoding on HTTP/1.0, a response's Connection field when it
// says close. So before a head is parsed, the raw head is made visible
// too: in the bufio.Reader's buffer when it fits there (the common case:
// no copy), else recorded as it is read (headReader.rec).

// headReader is the reader under a connection's bufio.Reader. It caps
// what a message head may take (n bytes; past that, reads end with
// io.EOF and n is 0), and while rec is set it appends all it reads to
// *rec.
type headReader struct {
	r   io.Reader
	n   int64
	rec *[]byte
}

func (h *headReader) Read(p []byte) (int, error) {
	if h.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p)
	h.n -= int64(n)
	if h.rec != nil {
		*h.rec = append(*h.rec, p[:n]...)
	}
	return n, err
}

// rawHead makes the head of the next message on br (start line, fields,
// blank line) available before it is parsed, reading from the connection
// as the parser would. It returns the head as a slice of br's buffer,
// valid until br is read, when the whole head fits there. Otherwise (a
// head longer than the buffer, or a read that failed) it copies what br
// holds to *rec, makes hr record from here on, and returns nil: once the
// head is parsed, (*rec)[:len(*rec)-br.Buffered()] is the head as the
// parser consumed it.
func rawHead(br *bufio.Reader, hr *headReader, rec *[]byte) []byte {
	for {
		b, _ := br.Peek(br.Buffered())
		if end := headEnd(b); end >= 0 {
			return b[:end]
		}
		if len(b) == br.Size() {
			break
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			break // the parser meets the same failure
		}
	}
	b, _ := br.Peek(br.Buffered())
	*rec = append((*rec)[:0], b...)
	hr.rec = rec
	return nil
}

// headEnd returns the length of the message head at the start of b, or -1
// when b does not hold all of it. Lines end at LF, with or without CR
// before it, as net/textproto reads them; the head ends at the first
// empty line after the start line.
func headEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n') // the start line's end
	for i >= 0 {
		rest := b[i+1:]
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return -1
		}
		if j == 0 || (j == 1 && rest[0] == '\r') {
			return i + 1 + j + 1
		}
		i += 1 + j
	}
	return -1
}

// eachField calls f with each line of the head's fields (after the start
// line, before the blank line), without its line ending. A line that
// starts with a space or a tab continues the field before it (obs-fold).
func eachField(head []byte, f func(line []byte)) {
	i := bytes.IndexByte(head, '\n')
	for i >= 0 {
		rest := head[i+1:]
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return
		}
		line := rest[:j]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) == 0 {
			return
		}
		f(line)
		i += 1 + j
	}
}

// fieldName returns the name of a field line: what comes before its colon
// (nil for a continuation line or a line without one).
func fieldName(line []byte) []byte {
	if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
		return nil
	}
	name, _, ok := bytes.Cut(line, []byte{':'})
	if !ok {
		return nil
	}
	return name
}
