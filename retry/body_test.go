package retry

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// chunkSource yields one chunk per Read and counts the Reads, to show that
// nothing reads ahead of the attempt.
type chunkSource struct {
	chunks [][]byte
	reads  int
	closed bool
}

func (s *chunkSource) Read(p []byte) (int, error) {
	s.reads++
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.chunks[0])
	s.chunks[0] = s.chunks[0][n:]
	if len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}

func (s *chunkSource) Close() error { s.closed = true; return nil }

func TestReplayableBodySmallBodyReplaysByteExact(t *testing.T) {
	want := []byte("{\"order\": 42, \"items\": [\"a\", \"b\"]}\x00\xff")
	b := NewReplayableBody(io.NopCloser(bytes.NewReader(want)), 1024)
	for attempt := range 3 {
		r, err := b.NewReader()
		if err != nil {
			t.Fatalf("attempt %d: NewReader: %v", attempt, err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("attempt %d read %q, %v; want %q", attempt, got, err, want)
		}
		r.Close()
	}
	if !b.Replayable() {
		t.Fatal("a body within the limit must stay replayable")
	}
}

func TestReplayableBodyRetryAfterPartialFirstAttempt(t *testing.T) {
	src := &chunkSource{chunks: [][]byte{[]byte("abc"), []byte("def"), []byte("ghi")}}
	b := NewReplayableBody(src, 1024)
	r1, _ := b.NewReader()
	p := make([]byte, 16)
	if n, _ := r1.Read(p); string(p[:n]) != "abc" {
		t.Fatalf("first attempt read %q, want abc", p[:n])
	}
	r1.Close() // the transport gave up after one chunk
	if src.closed {
		t.Fatal("closing an attempt's reader closed the source; a retry could not read the rest")
	}
	r2, err := b.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r2)
	if string(got) != "abcdefghi" {
		t.Fatalf("retry read %q, want the whole body abcdefghi", got)
	}
	b.Close()
	if !src.closed {
		t.Fatal("ReplayableBody.Close did not close the source")
	}
}

func TestReplayableBodyStreamsWithoutReadingAhead(t *testing.T) {
	src := &chunkSource{chunks: [][]byte{[]byte("first"), []byte("second")}}
	b := NewReplayableBody(src, 1024)
	r, _ := b.NewReader()
	p := make([]byte, 64)
	n, err := r.Read(p)
	if err != nil || string(p[:n]) != "first" {
		t.Fatalf("Read = %q, %v; want first", p[:n], err)
	}
	if src.reads != 1 {
		t.Fatalf("source read %d times to serve the first chunk, want 1: the body must not be read ahead", src.reads)
	}
}

func TestReplayableBodyLargeBodyStreamsWholeButIsNotReplayable(t *testing.T) {
	const limit = 1024
	want := strings.Repeat("0123456789abcdef", 4096) // 64 KiB, far over the limit
	src := &chunkSource{}
	for i := 0; i < len(want); i += 1000 {
		src.chunks = append(src.chunks, []byte(want[i:min(i+1000, len(want))]))
	}
	b := NewReplayableBody(src, limit)
	r, _ := b.NewReader()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != want {
		t.Fatalf("first attempt read %d bytes, %v; want the whole %d-byte stream", len(got), err, len(want))
	}
	if b.Replayable() {
		t.Fatal("a body over the limit must be marked not replayable")
	}
	if _, err := b.NewReader(); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("NewReader after overflow = %v, want ErrNotReplayable", err)
	}
}

func TestReplayableBodyOverflowBreaksAnAbandonedReader(t *testing.T) {
	src := &chunkSource{chunks: [][]byte{[]byte("abcd"), []byte("efgh")}}
	b := NewReplayableBody(src, 6)
	r1, _ := b.NewReader()
	p := make([]byte, 4)
	r1.Read(p)
	r2, _ := b.NewReader()
	io.ReadAll(r2) // streams past the 6-byte limit
	if _, err := r1.Read(p); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("the abandoned reader read on after overflow: err = %v, want ErrNotReplayable", err)
	}
}
