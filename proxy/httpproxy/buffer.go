package httpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// bufferPolicy is a route's buffer_requests: its request bodies are read
// whole before an endpoint is picked, so that a slow upload holds no
// upstream connection (nginx's proxy_request_buffering). The first memory
// bytes of a body stay in memory, the rest go to a temporary file in dir
// ("": os.TempDir()), and a body over max is refused with 413.
type bufferPolicy struct {
	memory, max int64
	dir         string
}

// bufferedBody is a request body read whole: in memory, or (when it
// outgrew the memory bound) in a temporary file that was unlinked as soon
// as it was made, so that nothing is left in the directory whatever
// happens to the process. It implements pipeline.BufferedBody: every
// attempt, retries included, reads it from its first byte.
type bufferedBody struct {
	mem  []byte
	file *os.File // nil while the body fits in memory
	size int64
	rd   io.Reader // Read's own reader, from the start
}

// NewReader returns a reader of the whole body from its first byte.
func (b *bufferedBody) NewReader() io.Reader {
	if b.file == nil {
		return bytes.NewReader(b.mem)
	}
	return io.NewSectionReader(b.file, 0, b.size)
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	if b.rd == nil {
		b.rd = b.NewReader()
	}
	return b.rd.Read(p)
}

// Close releases the body: its temporary file goes away with it.
func (b *bufferedBody) Close() {
	if b.file != nil {
		b.file.Close()
	}
}

var _ pipeline.BufferedBody = (*bufferedBody)(nil)

// bufferError is why a body could not be buffered, as the client is told.
type bufferError struct {
	status    int
	code, msg string
	err       error // the cause, for the log
}

func (e *bufferError) Error() string { return e.msg }

// errRouteTimeout: the route's timeout ran out while the body came in.
var errRouteTimeout = errors.New("route timeout ran out while reading the request body")

// read reads body, of length bytes (-1: unknown), whole. limit is the
// largest body accepted (limitName names the setting it comes from), and
// deadline, when not zero, the route's: buffering counts against it, as
// streaming the body would.
func (p *bufferPolicy) read(body io.Reader, length, limit int64, limitName string, deadline time.Time) (*bufferedBody, error) {
	tooLarge := &bufferError{status: http.StatusRequestEntityTooLarge, code: pipeline.CodeBodyTooLarge,
		msg: "request body exceeds " + limitName + " " + strconv.FormatInt(limit, 10)}
	if length > limit {
		return nil, tooLarge
	}
	b := &bufferedBody{}
	memCap := p.memory
	switch {
	case length >= 0 && length < memCap:
		memCap = length
	case length < 0:
		memCap = min(memCap, 4<<10) // grows as the body comes
	}
	b.mem = make([]byte, 0, memCap)
	for length < 0 || b.size < length {
		if len(b.mem) == cap(b.mem) {
			if int64(len(b.mem)) >= p.memory {
				break // the rest goes to a file
			}
			next := int(min(2*int64(cap(b.mem)), p.memory))
			b.mem = slices.Grow(b.mem, next-len(b.mem))[:len(b.mem):next]
		}
		n, err := body.Read(b.mem[len(b.mem):cap(b.mem)])
		b.mem = b.mem[:len(b.mem)+n]
		b.size += int64(n)
		if done, err := b.check(err, limit, deadline, tooLarge); done || err != nil {
			return b, err
		}
	}
	if length >= 0 && b.size == length {
		return b, nil
	}
	return b, b.spill(body, p.dir, length, limit, deadline, tooLarge)
}

// check judges one read: done at the body's end, an error when the body
// is over limit, the route's time is up, or the read failed.
func (b *bufferedBody) check(err error, limit int64, deadline time.Time, tooLarge error) (done bool, _ error) {
	switch {
	case b.size > limit:
		return false, tooLarge
	case err == io.EOF:
		return true, nil
	case err != nil:
		return false, readError(err)
	case !deadline.IsZero() && time.Now().After(deadline):
		return false, readError(errRouteTimeout)
	}
	return false, nil
}

// spill moves the body read so far to a temporary file and reads the rest
// into it.
func (b *bufferedBody) spill(body io.Reader, dir string, length, limit int64, deadline time.Time, tooLarge error) error {
	bp := h1.GetBuffer()
	defer h1.PutBuffer(bp)
	buf := *bp
	for length < 0 || b.size < length {
		if length >= 0 {
			buf = buf[:min(int64(len(buf)), length-b.size)]
		}
		n, err := body.Read(buf)
		if n > 0 {
			if b.file == nil {
				if ferr := b.createFile(dir); ferr != nil {
					return ferr
				}
			}
			if _, werr := b.file.Write(buf[:n]); werr != nil {
				return fileError(werr)
			}
		}
		b.size += int64(n)
		if done, err := b.check(err, limit, deadline, tooLarge); done || err != nil {
			return err
		}
	}
	return nil
}

// createFile makes the temporary file, unlinks it, and moves the bytes
// held in memory into it.
func (b *bufferedBody) createFile(dir string) error {
	f, err := os.CreateTemp(dir, "switchboard-body-*")
	if err != nil {
		return fileError(err)
	}
	// Unlinked at once: the open file keeps the data, and nothing is left
	// behind when the request ends, or the process does.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return fileError(err)
	}
	b.file = f
	if _, err := f.Write(b.mem); err != nil {
		return fileError(err)
	}
	b.mem = nil
	return nil
}

// readError names a failure to read the client's body: a stall (the body
// read timeout, or the route's timeout) is 408, anything else 400.
func readError(err error) error {
	if errors.Is(err, errRouteTimeout) || isTimeout(err) {
		return &bufferError{status: http.StatusRequestTimeout, code: pipeline.CodeRequestTimeout,
			msg: "the request body stopped coming", err: err}
	}
	return &bufferError{status: http.StatusBadRequest, code: pipeline.CodeBadRequest,
		msg: "could not read the request body", err: err}
}

// fileError is a failure of the proxy's own disk.
func fileError(err error) error {
	return &bufferError{status: http.StatusInternalServerError, code: CodeBufferFailed,
		msg: "could not buffer the request body", err: fmt.Errorf("buffer_requests: %w", err)}
}
