package retry

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// ErrNotReplayable is returned by ReplayableBody.NewReader once the body
// has outgrown its buffer limit: the bytes past the limit went to the first
// attempt only.
var ErrNotReplayable = errors.New("retry: request body is larger than the replay buffer")

// ReplayableBody makes a request body readable more than once. Readers from
// NewReader read the same bytes from the start: what has already been read
// comes from a buffer, the rest from the source, teed into the buffer as it
// streams. Nothing is read ahead: the first attempt gets each byte as soon
// as the source yields it, so a large or slow upload is not delayed.
//
// Once the source has yielded more than the limit, the buffer is dropped,
// Replayable reports false and no new reader may be made; the reader that
// was streaming keeps reading the source to its end. So a body of any size
// reaches the first attempt whole, and only a body within the limit is
// retried.
//
// Closing a reader does not close the source (the transport closes each
// attempt's body); the owner calls Close once every attempt is done. It is
// safe for concurrent use: a transport may still read an abandoned
// attempt's body while the next attempt starts.
type ReplayableBody struct {
	readMu   sync.Mutex // serializes reads of src; never held with mu while waiting
	mu       sync.Mutex // guards the fields below
	src      io.ReadCloser
	limit    int
	buf      []byte
	read     int64 // bytes read from src
	overflow bool
	srcErr   error // sticky: io.EOF or the source's error
}

// NewReplayableBody wraps src, keeping up to limit bytes for replay (0 or
// less: DefaultBodyLimit).
func NewReplayableBody(src io.ReadCloser, limit int) *ReplayableBody {
	if limit <= 0 {
		limit = DefaultBodyLimit
	}
	if src == nil {
		src = http.NoBody
	}
	return &ReplayableBody{src: src, limit: limit}
}

// Replayable reports whether another reader can still start from byte 0:
// the source has not yielded more than the limit.
func (b *ReplayableBody) Replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.overflow
}

// NewReader returns a reader of the whole body from its first byte, for
// one attempt, or ErrNotReplayable.
func (b *ReplayableBody) NewReader() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overflow {
		return nil, ErrNotReplayable
	}
	return &bodyReader{b: b}, nil
}

// Close closes the source.
func (b *ReplayableBody) Close() error { return b.src.Close() }

type bodyReader struct {
	b   *ReplayableBody
	off int64
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if n, done, err := r.fromBuffer(p); done {
		return n, err
	}
	b := r.b
	b.readMu.Lock()
	defer b.readMu.Unlock()
	// Another reader may have streamed on while this one waited.
	if n, done, err := r.fromBuffer(p); done {
		return n, err
	}
	// Read straight into the caller's slice and tee: never wait for more
	// than this one Read of the source. mu is not held meanwhile, so
	// Replayable and the buffered part stay available to other readers.
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		if !b.overflow {
			if len(b.buf)+n > b.limit {
				b.overflow, b.buf = true, nil
			} else {
				b.buf = append(b.buf, p[:n]...)
			}
		}
		b.read += int64(n)
		r.off += int64(n)
	}
	if err != nil {
		b.srcErr = err
	}
	return n, err
}

// fromBuffer serves p from what has been read already, or reports done
// false when r is at the front of the stream and must read the source.
func (r *bodyReader) fromBuffer(p []byte) (n int, done bool, err error) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.off < b.read && b.overflow:
		// Another reader took the stream past the buffer.
		return 0, true, ErrNotReplayable
	case r.off < b.read:
		n := copy(p, b.buf[r.off:])
		r.off += int64(n)
		return n, true, nil
	case b.srcErr != nil:
		return 0, true, b.srcErr
	case len(p) == 0:
		return 0, true, nil
	}
	return 0, false, nil
}

func (r *bodyReader) Close() error { return nil }
